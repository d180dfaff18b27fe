"""`grader audit`: mutation testing of a pack's reference, so that an author knows what its cases miss.

mutants.py makes the mutants (universalmutator's rules over the reference's own files); run.py grades them through
the batch's pipeline (grader.dispatch.local: builds, sandbox, run slots), keeps each verdict in a cache keyed by the
mutant and the cases that judged it, checks the survivors for equivalence on fresh inputs and grades the pack's
samples against what their VARIANT.toml says; report/audit.py renders the page.
"""
