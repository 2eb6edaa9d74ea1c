"""The call format the model speaks: the system prompt, how a call, an answer and a tool's response are
written, how a completion is parsed, and where generation stops. Data generation, the env, the rewards
and training all use this one definition, so demos and rollouts read alike."""
