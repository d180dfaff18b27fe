"""Grading a class: the roster, deadlines, fetching and pinning, the late policy, and the run.

One module per job: `roster` (the CSV), `deadlines` (time zones, extensions, cutoffs, push logs),
`fetch` (clone, pin, stream), `late` (the policy and its penalty), `lock` (one batch per store),
`progress` (what the instructor sees meanwhile), `summary` (the class's counts) and `grade_class`
(a batch run from roster to store). Where the submissions are graded is `grader.dispatch`'s.
"""
