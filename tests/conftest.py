import jax

# float64 is the reference precision of s2jax; promotion rules as strict as diffrax's and
# optimistix's test suites: no implicit dtype promotion, no implicit rank promotion.
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
