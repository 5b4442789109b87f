"""Example jobs, loaded by default (`--jobs jobs`). Copy one to start your own."""
