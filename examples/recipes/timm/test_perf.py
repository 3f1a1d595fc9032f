def test_training_speed(dlperf):
    run = dlperf.run(dlperf.scenario("torch", "timm_resnet", loop="timm_model:train", batch_size=16,
                                     warmup_steps=3, rounds=3, steps_per_round=5))
    dlperf.check(run)
    assert "data_wait" in run.metrics  # the loader's waits, apart from the step's compute
