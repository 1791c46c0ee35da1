"""The run: its settings declared once (``spec.RunSpec``)."""
