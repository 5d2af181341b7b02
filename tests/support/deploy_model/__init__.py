"""The deploy model checker (issue 36): random sequences of pipeline versions and user
steps run on the real engine beside a plain-Python reference of every state and sink.
`drive.run_sequence(world, seed, options)` runs one; bench/deploy_check.py runs many."""
