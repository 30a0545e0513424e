"""The built-in distribution policies (``single``, ``coarse``, ``fine``, ``multi_learner``, ``data_parallel``,
``async``, ``srl``, ``gpu_only``), registered on import; each names the systems whose layout it mirrors."""

from .policy import ROLES, DistributionPolicy, register

__all__: list[str] = []


register(
    DistributionPolicy(
        "single",
        "a plain loop (CleanRL)",
        "every fragment in this process; edges are direct references",
        mode="local",
        tradeoff="nothing crosses a process and nothing waits; one core does all the work",
    )
)
register(
    DistributionPolicy(
        "coarse",
        "RLlib sync sampling; MSRL MultiActorSingleLearner; Acme's layout (Acme runs it asynchronously)",
        "actor fragments (env + inference + buffer insert) x N on workers; learner x 1 (GPU if any)",
        groups={"env": "actors", "actor": "actors", "buffer": "actors", "learner": "learner", "driver": "learner"},
        replicas={"actors": "actors", "learner": 1},
        gpu_groups=("learner",),
        required_roles=("actor", "learner"),
        tradeoff="actors step in parallel and only trajectories and weights cross; the learner idles while actors roll out, and they idle while it learns",
    )
)
register(
    DistributionPolicy(
        "fine",
        "SEED RL; MSRL SingleActorLearnerMultiEnv",
        "env fragments x N on CPU workers; inference + buffer + learner x 1 (GPU if any)",
        groups={"env": "envs", "actor": "learner", "buffer": "learner", "learner": "learner", "driver": "learner"},
        replicas={"envs": "actors", "learner": 1},
        gpu_groups=("learner",),
        required_roles=("env", "actor"),
        tradeoff="inference is batched in one place, near the learner; every environment step crosses the network twice (observations in, actions out)",
    )
)
register(
    DistributionPolicy(
        "multi_learner",
        "DD-PPO; MSRL hand-written DP3",
        "the whole loop x N; gradients all-reduced",
        groups=dict.fromkeys(ROLES, "replicas"),
        replicas={"replicas": "learners"},
        gpu_groups=("replicas",),
        mode="averaged",
        collectives=("gradients all-reduced (torch.distributed: gloo on CPU, NCCL on GPU)",),
        required_roles=("learner",),
        tradeoff="N full copies share the work and exchange only gradients; each update waits for the slowest copy's all-reduce",
    )
)
register(
    DistributionPolicy(
        "data_parallel",
        "PyTorch DistributedDataParallel; DD-PPO; MSRL's fourth family (the whole loop replicated)",
        "the whole cell x N, each on its own re-seeded copies of every object; gradients averaged at every optimizer.step()",
        groups=dict.fromkeys(ROLES, "replicas"),
        replicas={"replicas": "replicas"},
        gpu_groups=("replicas",),
        collectives=("gradients averaged at every optimizer.step() (torch.distributed: gloo on CPU, NCCL on GPU)",),
        mode="whole",
        tradeoff="any loop with a torch optimiser runs as written, and each update sees N times the data; every replica steps its own copy of the environments, so N replicas cost N times the environment work",
    )
)
register(
    DistributionPolicy(
        "async",
        "IMPALA (without V-trace); A3C's asynchrony (A3C sends gradients); MSRL AsyncMultiActorSingleLearner",
        "actor fragments x N run free, streaming trajectories; learner x 1 consumes them as they arrive",
        groups={"env": "actors", "actor": "actors", "buffer": "actors", "learner": "learner", "driver": "learner"},
        replicas={"actors": "actors", "learner": 1},
        gpu_groups=("learner",),
        required_roles=("actor", "learner"),
        # samples_per_insert: Ape-X's learner, sampling its replay while the actors insert, bounded as
        # Reverb's rate limiter bounds it (fragnb.plan.decoupled.sample_ahead)
        options={"max_staleness": 1, "samples_per_insert": None},
        mode="decoupled",
        tradeoff="nobody waits for a whole round: actors keep rolling out while the learner learns; it trains on trajectories up to max_staleness versions old (with samples_per_insert, it samples its replay buffer meanwhile, within that many samples per transition inserted)",
    )
)


register(
    DistributionPolicy(
        "srl",
        "SRL (actor / policy / trainer workers)",
        "actor workers x N each step a ring of env groups; batched policy workers x M serve their inference; one trainer",
        groups={"env": "actors", "actor": "policy", "buffer": "actors", "learner": "trainer", "driver": "trainer"},
        replicas={"actors": ("actors", "ring"), "policy": ("policy_workers", "ring"), "trainer": 1},
        gpu_groups=("policy", "trainer"),
        required_roles=("env", "actor", "learner"),
        options={"ring": 2, "max_staleness": 1},
        mode="decoupled",
        tradeoff="each actor worker steps one env group while another waits for its batched actions; more processes and messages, which pays off only with cores to spare",
    )
)


register(
    DistributionPolicy(
        "gpu_only",
        "Podracer Anakin, WarpDrive; MSRL fused GPU fragments",
        "every fragment fused in one process per device, environments vectorised on it; x N devices, gradients all-reduced",
        groups=dict.fromkeys(ROLES, "device"),
        replicas={"device": "learners"},
        gpu_groups=("device",),
        collectives=("gradients all-reduced (torch.distributed: NCCL on GPUs, gloo on CPU)",),
        required_roles=("env", "learner"),
        mode="fused",
        tradeoff="no copies between host and device, no network; the environment must be written in torch, and one device holds everything",
    )
)
