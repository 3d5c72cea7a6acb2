"""Load and validate topology.yaml.

One job per module: format.py declares the keys, defaults and the JSON Schema; reader.py reads
YAML (with line/column marks, `include:` files, encoding errors); build.py turns what was read into
model.py's Topology; rules.py checks its meaning; loading.py runs them in that order. This package
exports what the rest of the project imports.
"""

from .format import DEFAULT_DELAYED_SUFFIX, DEFAULT_SUBSCRIPTION_TABLE, FORMAT, json_schema
from .loading import load, loads
from .model import Endpoint, Topology
from .problems import TopologyError

__all__ = [
    "DEFAULT_DELAYED_SUFFIX",
    "DEFAULT_SUBSCRIPTION_TABLE",
    "FORMAT",
    "Endpoint",
    "Topology",
    "TopologyError",
    "json_schema",
    "load",
    "loads",
]
