def test_training_speed(dlperf):
    run = dlperf.run(dlperf.scenario("torch", "plain_mlp", loop="train_loop:train", batch_size=32,
                                     warmup_steps=50, rounds=5, steps_per_round=300))
    dlperf.check(run)
