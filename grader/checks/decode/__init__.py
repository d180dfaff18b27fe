"""The KV-cache decode check, a plug-in of `grader.checks`: the course's verify_kv_cache program (req_6 of gpt2-m3).
The student's six kernels composed into GPT-2's forward pass (the forward check's layout, weights and gold), run
with the cache off (a full recompute per token, the baseline) and on (a prefill over the prompt, then one-token
decode steps through the cache), the state in the five globals the course's harness defines and the student's
attention.cuh declares extern (a variant's `defines` puts them in its libraries).

    spec.py      the [decode] table in assignment.toml, read and validated: its cases and its rules
    inputs.py    each case's tokens beside the forward check's weights, cached by content
    harness_half.py  the harness's half: the baseline and the KV passes, the globals kept in step, outputs sealed
    gold.py      each case's float64 logits at every decoded position (one gold pass over the whole sequence)
    verdict.py   the cases judged (the course's rule against the baseline, ours against the gold), speed-ups,
                 memory, and the check's hints, in a student's words
    check.py     the check behind the checks' interface (`CHECK`): its calls (one harness of its own), gold, results

This package's __init__ stays empty of imports: the harness imports `harness` alone.
"""
