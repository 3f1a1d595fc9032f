"""The training step's speed, A/B'd against a revision (pytest tests --dlperf-reference-rev=HEAD)."""


def test_training_step_speed(dlperf):
    scenario = dlperf.scenario("torch", "myproj_mlp", step="myproj.train:make_step", batch_size=256,
                               warmup_steps=5, rounds=8, steps_per_round=20)
    run = dlperf.run(scenario)
    assert run.loss_fell(), run.losses
