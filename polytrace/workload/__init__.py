"""The workload: PolyTrace traces (``trace/``), the length profiles fitted to them (``profiles/``),
the statistics that describe and check them (``describe``, ``fidelity``) and the packing comparison
on sampled batches (``packcompare``)."""
