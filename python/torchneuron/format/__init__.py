"""The binary format shared by the compiler (writer) and the runtime (reader).

`isa` defines the instruction records, `container` the NEFF-like file around them. This
package is the only contract between the compiler and the runtime/simulator.
"""

from torchneuron.format import isa
from torchneuron.format.container import (
    Neff, NeffFormatError, Stream, TensorDecl, read_neff, stream_name, write_neff,
)

__all__ = ["isa", "Neff", "NeffFormatError", "Stream", "TensorDecl", "read_neff",
           "stream_name", "write_neff"]
