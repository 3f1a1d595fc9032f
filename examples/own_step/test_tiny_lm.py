"""Our model's training speed, held against this machine's recorded baselines by pytest-dlperf."""


def test_tiny_lm_training_speed(dlperf):
    scenario = dlperf.scenario("torch", "tiny_lm", step="tiny_lm:make_step", batch_size=16,
                               warmup_steps=3, rounds=9, steps_per_round=10)
    run = dlperf.run(scenario)
    dlperf.check(run)
    assert run.loss_fell(), run.losses
