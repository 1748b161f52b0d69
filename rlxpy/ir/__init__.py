"""The backend-free IR: dtypes, shapes, ops, graphs, the reference interpreter and passes."""

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.shape import Dim, Shape, Sym

__all__ = ["DType", "Dim", "Graph", "Node", "Shape", "Sym", "ops"]
