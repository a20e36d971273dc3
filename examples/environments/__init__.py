"""Example OpenReward environments written with the SDK, served on 127.0.0.1 by tests and demos.

- `whodunit.WhoDunIt`: a deterministic mystery; investigate with tools, finish with `accuse`.
- `math_env.MathEnv`: arithmetic word problems; `calculator` tool, answered by the final plain message.
- `faulty.Faulty`: fault injection (raising, hanging, huge and garbled tool results).
- `closest_guess.ClosestGuess`: estimate a product; `score_group` ranks a group's estimates (a group reward).
- `closest_guess.GradedGuess`: easier products, each estimate graded by closeness (the evaluation-only quickstart's).
- `paint.PaintColour`: name the colour the task asks for, nothing else (the training quickstart's: a 135M model learns it in minutes).
- `corridor.Corridor`: a long walk with bulky observations that overflows the context without compaction.

`env_splits.TrainTestEnvironment` is their shared base: the train and test splits and the task listing.
Each module runs its own server: `python examples/environments/whodunit.py PORT`.
"""
