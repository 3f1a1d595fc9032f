"""A third-party package as far as the example project is concerned: installed into its environment."""


def samples(batch_size):
    return batch_size
