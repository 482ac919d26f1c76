"""The machine a result was measured on: host inventory, GPUs through NVML, the files of
/proc and /sys it reads, and the environment a JAX process needs.
"""
