def test_training_speed(dlperf):
    run = dlperf.run(dlperf.scenario("tensorflow", "keras_mlp", loop="keras_model:train", batch_size=32,
                                     warmup_steps=3, rounds=3, steps_per_round=10))
    dlperf.check(run)
