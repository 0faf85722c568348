"""Engines and what they share.

    costs.py         one layer instance: forward, backward (input- and weight-gradient phases), recompute seconds
    stages.py        typed StageCost per model chunk and rank; p2p; DP collectives; FLOPs; graphs
    offload.py       activation offloading: Transformer Engine's offload schedule, the waits it leaves, GPU-resident bytes
    closed_forms.py  DP exposure, optimizer step, memory: one definition for floats and NumPy columns
    step.py          what both engines do around the pipeline: validate, cost the stages, build the Estimate
    analytic.py      the step in closed form (pipeline bubble from parallel/schedules/)
    des.py           the step played out with simpy (never imports analytic.py)
    registry.py      the only dispatcher by engine name
"""
