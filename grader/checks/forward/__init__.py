"""The forward-pass check, a plug-in of `grader.checks`: the student's six kernels composed into GPT-2's
forward pass, as the course's program composes them, checked layer by layer (gold swapped in after
each step), end to end (the logits), and by greedy generation.

    spec.py      the [forward] table in assignment.toml, read and validated
    layout.py    the activations' and parameters' one allocation each, and the steps (which slices each kernel gets)
    compose.py   one step in the assignment's NumPy truth (the harness's swap-in gold and the grader's gold alike)
    harness_half.py  the harness's half: the three passes on the device, each output saved and sealed
    inputs.py    the deterministic weights and tokens, cached by content
    gold.py      the gold forward pass, the reference's tokens and its top-two margins, cached by content
    verdict.py   the three cases' verdicts and the check's hints, in a student's words
    check.py     the check behind the checks' interface (`CHECK`): its calls (one harness of its own), gold, results

This package's __init__ stays empty of imports: the harness imports `compose` and `harness` alone.
"""
