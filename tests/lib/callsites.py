"""What a function's callers put in each argument register and stack slot, read
from their machine code (gdb's `disassemble`): the oracle for arguments that a
compiler clone's DWARF does not name. GCC's IPA-SRA splits SaveProxy's
`channel` into `&channel->peers` and `&channel->id`, two parameters without a
DWARF entry of their own; the callers' code shows which registers carry them.

Each call site is followed backwards to the start of its basic block (a jump,
a call, a return, or a jump target ends it), and the block is evaluated
symbolically: a register holds ("in", reg) or ("mem", slot) - what it held at
the block's start, or the stack slot it was loaded from, rsp-relative at the
block's start -, ("add", value, k) after `lea k(%reg)`, ("const", n), or
("unk", addr) after anything else. Registers set before the block stay ("in",
...): unknown, never guessed."""

import re
import subprocess
from dataclasses import dataclass

from lib.gdb import GDB

_REGS = ["rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp"] + [f"r{i}" for i in range(8, 16)]
_ALIASES = {r: r for r in _REGS}
for _r in ("ax", "bx", "cx", "dx", "si", "di", "bp", "sp"):
    _ALIASES["e" + _r] = "r" + _r
for _i in range(8, 16):
    _ALIASES.update({f"r{_i}d": f"r{_i}", f"r{_i}w": f"r{_i}", f"r{_i}b": f"r{_i}"})
for _r, _b in (("ax", "al"), ("bx", "bl"), ("cx", "cl"), ("dx", "dl"), ("si", "sil"),
               ("di", "dil"), ("bp", "bpl")):
    _ALIASES[_b] = "r" + _r
# '   0x000000000009d0b7 <_Z15ncclProxySaveOp...+583>:\tmov    0x10(%rsp),%rsi'
_INSN = re.compile(r"^\s*(?:=>\s*)?0x([0-9a-f]+)(?: <[^>]*>)?:\s+(\S+)\s*(.*?)\s*$")
_STACK = re.compile(r"^(-?0x[0-9a-f]+|-?\d+)?\(%rsp\)$")
_BASE = re.compile(r"^(-?0x[0-9a-f]+|-?\d+)?\(%(\w+)\)$")


@dataclass
class CallSite:
    addr: int
    regs: dict    # register (64-bit name) -> symbolic value at the call
    pushed: list  # values pushed in the block, in order: [-1] lands at [rsp+8] in the callee


def disassemble(lib, start, size, timeout=120):
    """[(addr, mnemonic, operands)] of lib's code at [start, start+size) (gdb)."""
    out = subprocess.run([GDB, "-batch", "-nx", "-iex", "set auto-load off",
                          "-ex", f"disassemble {start:#x},{start + size:#x}", str(lib)],
                         capture_output=True, text=True, check=True, timeout=timeout,
                         stdin=subprocess.DEVNULL).stdout
    insns = []
    for line in out.splitlines():
        m = _INSN.match(line)
        if m:
            insns.append((int(m.group(1), 16), m.group(2), m.group(3).split(" <")[0].strip()))
    return insns


def _operands(text):
    parts, depth, cur = [], 0, ""
    for c in text:
        depth += (c == "(") - (c == ")")
        if c == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
    return parts + [cur.strip()] if cur.strip() else parts


def _reg(operand):
    return _ALIASES.get(operand[1:]) if operand.startswith("%") else None


def _ends_block(mnemonic):
    return mnemonic.startswith("j") or mnemonic in ("call", "ret")


def _branch_target(mnemonic, operands):
    m = re.match(r"0x([0-9a-f]+)$", operands)
    return int(m.group(1), 16) if m and (mnemonic.startswith("j") or mnemonic == "call") else None


class _Block:
    """Symbolic registers and stack of one basic block."""

    def __init__(self):
        self.regs = {r: ("in", r) for r in _REGS}
        self.stack, self.depth, self.pushed = {}, 0, []

    def value(self, operand):
        if operand.startswith("$"):
            return ("const", int(operand[1:], 0))
        if _reg(operand):
            return self.regs[_reg(operand)]
        m = _STACK.match(operand)
        if m:
            slot = int(m.group(1) or "0", 0) - self.depth
            return self.stack.get(slot, ("mem", slot))
        return ("unk", operand)

    def step(self, addr, mnemonic, operands):
        ops = _operands(operands)
        if mnemonic == "push":
            self.pushed.append(self.value(ops[0]))
            self.depth += 8
            self.stack[-self.depth] = self.pushed[-1]
            return
        if mnemonic == "pop":
            self.depth -= 8
            self.pushed = self.pushed[:-1]
            self.regs[_reg(ops[0])] = ("unk", addr)
            return
        dst = ops[-1] if ops else ""
        reg = _reg(dst)
        if reg and mnemonic == "lea":
            m = _BASE.match(ops[0])
            base = m and _ALIASES.get(m.group(2)) == m.group(2) and m.group(2) != "rsp"
            self.regs[reg] = ("add", self.regs[m.group(2)], int(m.group(1) or "0", 0)) \
                if base else ("unk", addr)
        elif reg and mnemonic == "mov" and dst[1:] == reg:  # a full 64-bit move
            self.regs[reg] = self.value(ops[0])
        elif reg:
            self.regs[reg] = ("unk", addr)
        elif mnemonic == "mov" and _STACK.match(dst):
            self.stack[int(_STACK.match(dst).group(1) or "0", 0) - self.depth] = \
                self.value(ops[0])


def call_sites(lib, caller_start, caller_size, callee):
    """Every call from lib's code at [caller_start, +caller_size) to address callee,
    with its registers and pushes as the block before it set them."""
    insns = disassemble(lib, caller_start, caller_size)
    targets = {t for _, m, o in insns if (t := _branch_target(m, o)) is not None}
    sites = []
    for i, (addr, mnemonic, operands) in enumerate(insns):
        if mnemonic != "call" or _branch_target(mnemonic, operands) != callee:
            continue
        start = i
        while start > 0 and not _ends_block(insns[start - 1][1]) and \
                insns[start][0] not in targets:
            start -= 1
        block = _Block()
        for insn in insns[start:i]:
            block.step(*insn)
        sites.append(CallSite(addr, block.regs, block.pushed))
    return sites
