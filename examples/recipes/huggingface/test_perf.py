def test_training_speed(dlperf):
    run = dlperf.run(dlperf.scenario("torch", "hf_gpt2", loop="hf_model:train", batch_size=8,
                                     warmup_steps=3, rounds=3, steps_per_round=10))
    dlperf.check(run)
