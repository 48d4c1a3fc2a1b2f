"""pkb on a Ray cluster: the service's groups as Ray actors, and a trainer's own way in.

``pkb serve --ray [ADDRESS]`` places each group (a warm lane of W ranks) as a Ray
actor in a placement group of W devices on one node (:mod:`pkb_core.ray.placement`);
:class:`EvaluatorPool` gives a Ray driver or actor the service without HTTP
(:mod:`pkb_core.ray.pool`). Importing this package imports Ray (``pip install
pkb[ray]``); nothing else in pkb does. docs/serve.md, "Beyond one node".
"""
from pkb_core.ray.pool import EvaluatorPool

__all__ = ["EvaluatorPool"]
