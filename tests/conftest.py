import jax

# float64 is the reference precision of s2jax.
jax.config.update("jax_enable_x64", True)
