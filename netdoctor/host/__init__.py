"""The host layer: the only code that touches /sys, runs commands, calls NVML or netlink.

Everything here takes a root (the live `/` or a snapshot directory) so that the same
inventory code runs on a live node and on a snapshot.
"""
