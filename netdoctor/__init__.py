"""netdoctor: a health doctor for GPU cluster nodes and their network fabric."""

__version__ = "0.1.0"
