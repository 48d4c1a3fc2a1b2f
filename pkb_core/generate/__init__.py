"""Generation: prompts built from a problem and a backend, LLM providers, and the code blocks taken from their answers."""
