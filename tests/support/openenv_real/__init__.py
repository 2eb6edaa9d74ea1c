"""Scripts that run inside `.venv-openenv` (the real openenv 0.10.0), driven by tests/integrations/test_openenv_real.py."""
