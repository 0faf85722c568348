"""Layout: the plan and where its work sits.

    plan.py        ParallelPlan, validated against a model
    shard.py       shard(graph, plan): an unsharded graph on one rank, with the collectives the split implies
    ranks.py       Megatron rank order: each group's degree and stride
    split.py       Megatron-Core's layers per model chunk and pipeline rank (uneven splits included)
    schedules/     one file per pipeline schedule: order (DES), bubble and in-flight micro-batches (closed forms)
"""
