"""The private plumbing the Slime and Miles hooks share: a trainer `Sample` in, one episode run, the
`Sample`(s) filled out. Nothing here is a hook path a trainer flag names; the faces are in `backends/`.

| Module | What |
|---|---|
| `generate` | the plain generate path: the row's task, one episode, one fill |
| `partial` | the partial-rollout path: an episode suspended and resumed across rollout steps |
| `fill` | a `Trajectory` written into the trainer's `Sample` (statuses, placeholders, fan-out) |
| `record` | `EpisodeRecord`: what a sample's metadata says about its episode |
| `reward` | the RM hook's rewards: the episode's own, or the environment's group score |
| `groups` | how a batch falls into prompt groups and rollouts (one rule for every hook) |
| `state` | the per-process state built once from the trainer's `args` |
| `abort` | whether the trainer is aborting its rollout step |
| `suspended` | the process's suspended episodes (partial rollout) |
"""
