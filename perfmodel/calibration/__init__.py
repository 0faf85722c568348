"""Calibration: what the cost models' efficiencies are, where their numbers come from, and how
they are fitted.

    host         facts about this CPU (ISA, caches, clock), no torch
    microbench   `perfmodel calibrate`: microbenchmark this host into host-cpu / host-node specs
    spec_writer  measured numbers -> spec YAML with provenance
    trace_import a torch.profiler trace / nccl-tests log -> calibration of an existing spec
    commands     the `perfmodel calibrate` command (the CLI only parses arguments)

Imports point one way: commands -> microbench -> spec_writer -> host; trace_import stands alone.
Nothing here is imported by the package top, so `import perfmodel` stays light.
"""
