"""Problems: the problem-file contract, the registry that finds problem files through entry points, and the words that describe a problem's inputs."""
