"""The assignment's credit rules in the reports' words: an [assignment.additional] group against its minimum and
its extra-credit cap, its exclusive sets, and a grade a compile error made 0 (grader.scoring.apply_credit_rules)."""

from __future__ import annotations

from grader.results import GroupResult, Result


def credit_lines(result: Result) -> list[str]:
    """The sentences a report shows under the score: [] for an assignment without credit rules."""
    lines = []
    if result.zeroed_by:
        named = ", ".join(result.zeroed_by[:3]) + (f" and {len(result.zeroed_by) - 3} more"
                                                   if len(result.zeroed_by) > 3 else "")
        lines.append(f"score 0: a compile error is 0 for the whole grade, and {named} did not build")
    if result.additional is not None:
        lines.append(group_sentence(result.additional))
        for members, counted in result.additional.exclusive.items():
            if counted:
                lines.append(f"only one of {members} counts for credit: {counted}")
    return lines


def group_sentence(group: GroupResult) -> str:
    """"additional optimizations: op_8 (2) + op_9 (1) = 3 of the 10 points the course asks for"."""
    scored = [f"{name} ({points:g})" for name, points in group.points.items() if points > 0]
    if not scored:
        return f"{group.title}: none scored, 0 of the {group.minimum:g} points the course asks for"
    sum_text = f"{' + '.join(scored)} = {group.total:g}" if len(scored) > 1 else f"{scored[0]}"
    if group.shortfall > 0:
        return f"{group.title}: {sum_text} of the {group.minimum:g} points the course asks for"
    extra = ""
    if group.extra_credit > 0:
        capped = group.total - group.credited
        extra = (f", {group.extra_credit:g} extra credit" + (f" (capped at {group.extra_credit_cap:g}: "
                                                             f"{capped:g} not counted)" if capped > 1e-9 else ""))
    return f"{group.title}: {sum_text}: the {group.minimum:g} points the course asks for{extra}"
