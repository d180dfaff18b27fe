"""Exports that are not renderings of a result: what another system needs to grade (the Gradescope autograder zip)."""
