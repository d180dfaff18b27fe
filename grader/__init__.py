"""kernel-grader: automated grading and autotests for GPU programming courses."""

__version__ = "0.1.0"
