"""A listening socket's door shut: nobody new connects, the connections it accepted go on.

The launcher shuts the judge's store once the judge's ranks have connected
(:class:`pkb_core.launch.stores.JudgeStore`), and a reference group's keeper shuts
its TCPStore once the group's ranks have (:func:`pkb_core.keeper.process.serve_tcpstore`):
a later process (a reference-backend candidate keeps its network) cannot open a
connection to stall their barriers or fill their memory."""
from __future__ import annotations

import ctypes
import socket
import struct

#: setsockopt option that attaches a classic BPF program to a socket (linux/socket.h).
_SO_ATTACH_FILTER = 26


def close_door(listen: socket.socket) -> None:
    """Let nobody new connect to ``listen``, while the connections it accepted go on.

    A one-instruction socket filter (``ret #0``) drops every packet that reaches the
    listening socket, so a new peer's handshake never completes; the accepted
    connections are sockets of their own and are untouched. (Shutting the listening
    socket instead makes torch's store server spin on failed accepts.)"""
    program = ctypes.create_string_buffer(struct.pack("HBBI", 0x06, 0, 0, 0))  # BPF_RET | BPF_K, 0
    fprog = struct.pack("HL", 1, ctypes.addressof(program))
    listen.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)
