"""Where results live and how they travel: the SQLite store (schema, rows, queries),
device leases between sweeps, export/import formats and results saved aside.
"""
