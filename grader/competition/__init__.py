"""The competition: a documented run set of GPT-2 generation through a submission's six kernels, timed, gated on
its logits, ranked by the geometric mean of tokens per second (`grader time --competition`).

    spec.py      the [competition] table: the runs, the folder laid over kernels/, the protocol's knobs
    harness_half.py  the harness's half: warm-up generations, then timed ones until the stop rule; tokens, the last
                 timed generation's logits and every generation's seconds saved and sealed
    judge.py     the gold (float64, over the tokens the submission generated) and the gate: logits and tokens
    run.py       build (kernels/ with the competition folder laid over it), run with the GPU held alone, judge
    results.py   what a competition found (runs, the geometric mean, whether it is entered), JSON-ready

The weights are drawn as the [forward] check draws them (no checkpoint can be downloaded); its shapes and its
logits rule are the competition's. This package's __init__ stays empty of imports: the harness imports `harness`.
"""
