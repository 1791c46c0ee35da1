"""Measuring kernels: result files, their statistics and the gate (``results/``), A/B runs of two
revisions (``ab/``), suite runs on one machine or a Ray cluster (``bench/``), tuning sessions
(``tuning/``), the environment record and progress lines. Knows no step model."""
