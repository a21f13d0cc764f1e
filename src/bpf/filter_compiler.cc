#include "bpf/filter_compiler.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <string>

namespace tpe::bpf {
namespace {

// PERF_MAX_TRACE_SIZE: tp_prog_is_valid_access refuses ctx reads at or past it.
constexpr uint32_t kMaxTraceSize = 8192;
// The pt_regs pointer perf_trace_run_bpf_submit writes over the record's first 8 bytes.
constexpr uint32_t kRegsSlotBytes = 8;
// Most byte compares a "*x*" search may emit.
constexpr uint64_t kMaxSubstringCompares = 1024;
constexpr uint32_t kScratchBytes = 32;

uint64_t WidthMask(uint32_t size) { return size >= 8 ? ~uint64_t{0} : (uint64_t{1} << (size * 8)) - 1; }

uint64_t SignExtend(uint64_t v, uint32_t size) {
  if (size >= 8) return v;
  const unsigned shift = 64 - size * 8;
  return static_cast<uint64_t>(static_cast<int64_t>(v << shift) >> shift);
}

bool FitsImm(uint64_t v) { return static_cast<int64_t>(v) == static_cast<int32_t>(static_cast<uint32_t>(v)); }

uint64_t CpuCount(const FilterPredicate& p) {
  uint64_t n = 0;
  for (const auto& r : p.cpus) n += uint64_t{r.second} - r.first + 1;
  return n;
}

// The jump op for `op` on integers, or for its negation.
uint8_t JumpOp(FilterOp op, bool is_signed, bool negate) {
  if (negate) {
    switch (op) {
      case FilterOp::kEq:
        op = FilterOp::kNe;
        break;
      case FilterOp::kNe:
        op = FilterOp::kEq;
        break;
      case FilterOp::kLt:
        op = FilterOp::kGe;
        break;
      case FilterOp::kLe:
        op = FilterOp::kGt;
        break;
      case FilterOp::kGt:
        op = FilterOp::kLe;
        break;
      case FilterOp::kGe:
        op = FilterOp::kLt;
        break;
      default:
        break;
    }
  }
  switch (op) {
    case FilterOp::kEq:
      return BPF_JEQ;
    case FilterOp::kNe:
      return BPF_JNE;
    case FilterOp::kLt:
      return is_signed ? BPF_JSLT : BPF_JLT;
    case FilterOp::kLe:
      return is_signed ? BPF_JSLE : BPF_JLE;
    case FilterOp::kGt:
      return is_signed ? BPF_JSGT : BPF_JGT;
    case FilterOp::kGe:
      return is_signed ? BPF_JSGE : BPF_JGE;
    default:
      return BPF_JEQ;
  }
}

class Compiler {
 public:
  Compiler(const FilterCodeContext& cx, Assembler* a) : cx_(cx), a_(a) {}

  // Emits code that jumps to `target` when `e` evaluates to `jump_if` and falls through
  // otherwise.
  Status Jump(const FilterExpr& e, Label target, bool jump_if) {
    switch (e.kind) {
      case FilterExpr::Kind::kCompare:
        return Predicate(e.pred, target, jump_if);
      case FilterExpr::Kind::kNot:
        if (e.children.empty()) {  // EvaluateFilter: false
          if (!jump_if) a_->Goto(target);
          return Status::Ok();
        }
        return Jump(e.children[0], target, !jump_if);
      case FilterExpr::Kind::kAnd:
      case FilterExpr::Kind::kOr: {
        const bool is_and = e.kind == FilterExpr::Kind::kAnd;
        if (e.children.empty()) {  // an empty && is true, an empty || false
          if (is_and == jump_if) a_->Goto(target);
          return Status::Ok();
        }
        // && jumping on false and || jumping on true: every child may take the jump.
        // Otherwise a child deciding the other way skips the rest, and the last child decides.
        if (is_and != jump_if) {
          for (const auto& c : e.children) TPE_RETURN_IF_ERROR(Jump(c, target, jump_if));
          return Status::Ok();
        }
        Label done = a_->NewLabel();
        for (size_t i = 0; i + 1 < e.children.size(); ++i) {
          TPE_RETURN_IF_ERROR(Jump(e.children[i], done, !is_and));
        }
        TPE_RETURN_IF_ERROR(Jump(e.children.back(), target, jump_if));
        a_->Bind(done);
        return Status::Ok();
      }
    }
    return Internal("unknown filter node");
  }

  // The predicate's value when the record cannot change it (the same decisions IntegerCompare,
  // CpusCompare and StringPredicate make), else nullopt.
  static std::optional<bool> ConstantPredicate(const FilterPredicate& p) {
    const FilterField& f = p.field;
    switch (f.kind) {
      case FilterFieldKind::kInteger:
      case FilterFieldKind::kCpu:
        if (p.operand == FilterOperand::kCpus) {
          if (CpuCount(p) > 1 && p.op == FilterOp::kEq) return false;  // a set never equals one CPU
          return std::nullopt;
        }
        if (p.operand == FilterOperand::kInteger && p.op == FilterOp::kBitAnd &&
            (f.kind == FilterFieldKind::kCpu || (p.value & WidthMask(ScalarSize(f))) == 0)) {
          return false;  // filter_pred_cpu has no &; x & 0 is 0
        }
        return std::nullopt;
      case FilterFieldKind::kCharArray:
      case FilterFieldKind::kComm: {
        if (p.operand != FilterOperand::kString) return std::nullopt;
        const uint32_t n = f.kind == FilterFieldKind::kComm ? static_cast<uint32_t>(kFilterCommBytes) : f.size;
        std::optional<bool> c = ConstantMatch(p, n);
        if (c) return *c != p.invert;
        return std::nullopt;
      }
      default:
        return std::nullopt;
    }
  }

  // Folds the record-independent parts of `e` in place: returns the value of `e` when it is
  // constant; otherwise `e` keeps only children that depend on the record (so the emitted code
  // has no jump that is always or never taken, and no code after such a jump).
  static std::optional<bool> Fold(FilterExpr* e) {
    switch (e->kind) {
      case FilterExpr::Kind::kCompare:
        return ConstantPredicate(e->pred);
      case FilterExpr::Kind::kNot: {
        if (e->children.empty()) return false;  // EvaluateFilter: false
        std::optional<bool> c = Fold(&e->children[0]);
        if (c) return !*c;
        return std::nullopt;
      }
      case FilterExpr::Kind::kAnd:
      case FilterExpr::Kind::kOr: {
        const bool is_and = e->kind == FilterExpr::Kind::kAnd;
        std::vector<FilterExpr> kept;
        for (auto& c : e->children) {
          std::optional<bool> v = Fold(&c);
          if (!v) {
            kept.push_back(std::move(c));
          } else if (*v != is_and) {
            return *v;  // false decides an &&, true an ||
          }
        }
        if (kept.empty()) return is_and;  // an empty && is true, an empty || false
        if (kept.size() == 1) {
          FilterExpr only = std::move(kept[0]);
          *e = std::move(only);
          return std::nullopt;
        }
        e->children = std::move(kept);
        return std::nullopt;
      }
    }
    return std::nullopt;
  }

  // A predicate whose value does not depend on the record. Fold() removes them all but a
  // constant whole filter; this is the code for that one: a jump on the ctx pointer (never 0),
  // always taken (JNE) or never (JEQ), rather than a goto or nothing, so that neither the
  // code after the filter nor the code at `target` is unreachable in the verifier's CFG check
  // (check_cfg refuses "unreachable insn"); the verifier knows which way the branch goes and
  // explores only that one.
  void Constant(bool value, Label target, bool jump_if) {
    a_->Jump(value == jump_if ? BPF_JNE : BPF_JEQ, cx_.ctx, 0, target);
  }

 private:
  static Status Unsupported(const FilterPredicate& p, const std::string& why) {
    FilterExpr e;
    e.pred = p;
    return Unimplemented(FilterToString(e) + " at column " + std::to_string(p.column) + ": " + why);
  }

  // Emits `code` (which falls through when its condition holds and jumps to the label it is
  // given otherwise) so that the whole jumps to `target` when the condition equals `jump_if`.
  void Wrap(bool jump_if, Label target, const std::function<void(Label)>& code) {
    if (!jump_if) {
      code(target);
      return;
    }
    Label no = a_->NewLabel();
    code(no);
    a_->Goto(target);
    a_->Bind(no);
  }

  // R0 = `size` bytes at ctx + `offset`, zero-extended; aligned loads only (byte loads
  // assembled little-endian when the field is misaligned). Clobbers R1.
  void LoadCtx(uint32_t size, uint32_t offset) {
    const auto off = [](uint32_t o) { return static_cast<int16_t>(o); };
    if (offset % size == 0) {
      a_->Load(size, R0, cx_.ctx, off(offset));
      return;
    }
    a_->Load(1, R0, cx_.ctx, off(offset + size - 1));
    for (uint32_t i = size - 1; i-- > 0;) {
      a_->Alu(BPF_LSH, R0, 8);
      a_->Load(1, R1, cx_.ctx, off(offset + i));
      a_->AluReg(BPF_OR, R0, R1);
    }
  }

  // Why the record field `f` cannot be read, or "".
  static std::string RecordFieldProblem(const FilterField& f, uint32_t size) {
    if (f.offset < kRegsSlotBytes) {
      return "the first 8 bytes of the record (common_type, common_flags, common_preempt_count, common_pid) hold a "
             "pt_regs pointer when a tracepoint BPF program runs (perf_trace_run_bpf_submit), so " +
             f.name + " cannot be read";
    }
    if (f.offset + uint64_t{size} > kMaxTraceSize) {
      return f.name + " lies beyond the " + std::to_string(kMaxTraceSize) +
             " bytes a tracepoint program may read (PERF_MAX_TRACE_SIZE)";
    }
    return "";
  }

  static bool IsCommonPid(const FilterField& f) {
    return f.kind == FilterFieldKind::kInteger && f.name == "common_pid" && f.offset == 4 && f.size == 4;
  }

  // Checks an integer-valued left-hand side (record integer, common_pid, CPU).
  static Status CheckScalar(const FilterPredicate& p) {
    const FilterField& f = p.field;
    if (f.kind == FilterFieldKind::kCpu || IsCommonPid(f)) return Status::Ok();
    if (f.size != 1 && f.size != 2 && f.size != 4 && f.size != 8) {
      return Unsupported(p, f.name + " is " + std::to_string(f.size) + " bytes; only 1, 2, 4 and 8 compare");
    }
    const std::string problem = RecordFieldProblem(f, f.size);
    if (!problem.empty()) return Unsupported(p, problem);
    return Status::Ok();
  }

  // R0 = the scalar, zero-extended from its size (CPU: 4 bytes). Clobbers R1-R5.
  void LoadScalar(const FilterField& f) {
    if (f.kind == FilterFieldKind::kCpu) {
      a_->Call(BPF_FUNC_get_smp_processor_id);
    } else if (IsCommonPid(f)) {
      // current->pid: the low half of (tgid << 32 | pid).
      a_->Call(BPF_FUNC_get_current_pid_tgid);
      a_->Alu(BPF_LSH, R0, 32);
      a_->Alu(BPF_RSH, R0, 32);
    } else {
      LoadCtx(f.size, f.offset);
    }
  }

  static uint32_t ScalarSize(const FilterField& f) { return f.kind == FilterFieldKind::kCpu ? 4 : f.size; }

  // R0 <op> value (64-bit), jumping to `target` when it holds.
  void CompareR0(uint8_t op, uint64_t value, Label target) {
    if (FitsImm(value)) {
      a_->Jump(op, R0, static_cast<int32_t>(static_cast<uint32_t>(value)), target);
    } else {
      a_->LoadImm64(R1, value);
      a_->JumpReg(op, R0, R1, target);
    }
  }

  // filter_pred_<op>_<type> (and filter_pred_cpu): both sides cast to the field's type.
  void IntegerCompare(const FilterPredicate& p, Label target, bool jump_if) {
    const FilterField& f = p.field;
    const uint32_t size = ScalarSize(f);
    const bool is_signed = f.kind == FilterFieldKind::kCpu ? true : f.is_signed;
    const uint64_t value = p.value & WidthMask(size);
    if (p.op == FilterOp::kBitAnd) {
      if (f.kind == FilterFieldKind::kCpu || value == 0) {  // filter_pred_cpu has no &; x & 0 is 0
        Constant(false, target, jump_if);
        return;
      }
      LoadScalar(f);
      if (FitsImm(value)) {
        a_->Alu(BPF_AND, R0, static_cast<int32_t>(static_cast<uint32_t>(value)));
      } else {
        a_->LoadImm64(R1, value);
        a_->AluReg(BPF_AND, R0, R1);
      }
      a_->Jump(jump_if ? BPF_JNE : BPF_JEQ, R0, 0, target);
      return;
    }
    LoadScalar(f);
    const bool ordered = p.op != FilterOp::kEq && p.op != FilterOp::kNe;
    uint64_t rhs = value;
    if (ordered && is_signed && size < 8) {
      const int32_t shift = static_cast<int32_t>(64 - 8 * size);
      a_->Alu(BPF_LSH, R0, shift);
      a_->Alu(BPF_ARSH, R0, shift);
      rhs = SignExtend(value, size);
    }
    CompareR0(JumpOp(p.op, ordered && is_signed, !jump_if), rhs, target);
  }

  // A scalar against CPUS{...}, as EvaluateFilter's ScalarVsCpus (the kernel turns one CPU into
  // an unsigned ==/!=; several use filter_pred_<size>_cpumask on the value as an unsigned int).
  void CpusCompare(const FilterPredicate& p, Label target, bool jump_if) {
    const FilterField& f = p.field;
    const uint32_t size = ScalarSize(f);
    if (CpuCount(p) == 1) {
      const uint64_t cpu = p.cpus[0].first & WidthMask(size);
      LoadScalar(f);
      const FilterOp op = p.op == FilterOp::kNe ? FilterOp::kNe : FilterOp::kEq;
      CompareR0(JumpOp(op, false, !jump_if), cpu, target);
      return;
    }
    if (p.op == FilterOp::kEq) {  // a set of several CPUs never equals one CPU
      Constant(false, target, jump_if);
      return;
    }
    const uint32_t nr = cx_.nr_cpu_ids == 0 ? kMaxFilterCpus : cx_.nr_cpu_ids;
    LoadScalar(f);
    if (size == 8) {  // the cpumask functions read the value as an unsigned int
      a_->Alu(BPF_LSH, R0, 32);
      a_->Alu(BPF_RSH, R0, 32);
    }
    Wrap(jump_if, target, [&](Label no) {
      CompareR0(BPF_JGE, nr, no);
      if (p.op != FilterOp::kBitAnd) return;  // != : any CPU below nr_cpu_ids
      Label yes = a_->NewLabel();
      for (const auto& [first, last] : p.cpus) {
        if (first == last) {
          CompareR0(BPF_JEQ, first, yes);
          continue;
        }
        Label next = a_->NewLabel();
        CompareR0(BPF_JLT, first, next);
        CompareR0(BPF_JLE, last, yes);
        a_->Bind(next);
      }
      a_->Goto(no);
      a_->Bind(yes);
    });
  }

  // Where string bytes live: `base` + `off` .. + n.
  struct Bytes {
    Reg base;
    int32_t off;
    uint32_t n;
  };

  // The match result when it does not depend on the string (the kernel's regex_match_* on N
  // bytes), else nullopt.
  static std::optional<bool> ConstantMatch(const FilterPredicate& p, uint32_t n) {
    const size_t len = p.pattern.size();
    switch (p.match) {
      case StringMatch::kPrefix:
        if (n < len) return false;
        if (len == 0) return true;
        break;
      case StringMatch::kSuffix:
        if (n == 0 || n - 1 < len) return false;
        if (len == 0) return true;
        break;
      case StringMatch::kSubstring:
        if (len == 0) return true;
        if (len > n) return false;
        break;
      default:
        break;
    }
    return std::nullopt;
  }

  static Status CheckStringMatch(const FilterPredicate& p, uint32_t n) {
    if (p.match == StringMatch::kGlob) {
      return Unsupported(p,
                         "glob patterns (* inside, ?, [...] or \\) cannot be compiled to BPF; use a prefix \"x*\", "
                         "suffix \"*x\" or substring \"*x*\" pattern");
    }
    if (p.match == StringMatch::kSubstring && !ConstantMatch(p, n)) {
      const uint64_t compares = (uint64_t{n} - p.pattern.size() + 1) * p.pattern.size();
      if (compares > kMaxSubstringCompares) {
        return Unsupported(p, "searching " + std::to_string(n) + " bytes for a " + std::to_string(p.pattern.size()) +
                                  "-byte substring takes " + std::to_string(compares) + " byte compares (at most " +
                                  std::to_string(kMaxSubstringCompares) + " are generated)");
      }
    }
    return Status::Ok();
  }

  // Jumps to `no` unless the `len` bytes at s.off + at equal `text`. Clobbers R0.
  void BytesEqual(const Bytes& s, uint32_t at, std::string_view text, Label no) {
    for (size_t i = 0; i < text.size(); ++i) {
      a_->Load(1, R0, s.base, static_cast<int16_t>(s.off + static_cast<int32_t>(at + i)));
      a_->Jump(BPF_JNE, R0, static_cast<uint8_t>(text[i]), no);
    }
  }

  // The kernel's regex_match_full/front/end/middle on the N bytes of `s` (see EvaluateFilter's
  // MatchFull etc.): falls through on a match, jumps to `no` otherwise. Not for constant
  // matches or globs.
  void StringMatchCode(const FilterPredicate& p, const Bytes& s, Label no) {
    const std::string& pat = p.pattern;
    const uint32_t n = s.n;
    switch (p.match) {
      case StringMatch::kFull: {  // strncmp(field, pattern, N) == 0
        const size_t common = std::min<size_t>(pat.size(), n);
        BytesEqual(s, 0, std::string_view(pat).substr(0, common), no);
        if (pat.size() < n) BytesEqual(s, static_cast<uint32_t>(pat.size()), std::string_view("\0", 1), no);
        return;
      }
      case StringMatch::kPrefix:
        BytesEqual(s, 0, pat, no);
        return;
      case StringMatch::kSuffix:  // the bytes just before the array's last byte
        BytesEqual(s, n - 1 - static_cast<uint32_t>(pat.size()), pat, no);
        return;
      case StringMatch::kSubstring: {  // strnstr over all N bytes
        Label found = a_->NewLabel();
        for (uint32_t i = 0; i + pat.size() <= n; ++i) {
          Label next = a_->NewLabel();
          BytesEqual(s, i, pat, next);
          a_->Goto(found);
          a_->Bind(next);
        }
        a_->Goto(no);
        a_->Bind(found);
        return;
      }
      case StringMatch::kGlob:
        return;
    }
  }

  Status StringPredicate(const FilterPredicate& p, Label target, bool jump_if) {
    const FilterField& f = p.field;
    const bool comm = f.kind == FilterFieldKind::kComm;
    const uint32_t n = comm ? static_cast<uint32_t>(kFilterCommBytes) : f.size;
    if (!comm) {
      const std::string problem = RecordFieldProblem(f, n);
      if (!problem.empty()) return Unsupported(p, problem);
    }
    TPE_RETURN_IF_ERROR(CheckStringMatch(p, n));
    // Jump when match == (jump_if XOR invert).
    const bool jump_on_match = jump_if != p.invert;
    if (std::optional<bool> c = ConstantMatch(p, n)) {
      Constant(*c, target, jump_on_match);
      return Status::Ok();
    }
    Bytes s{cx_.ctx, static_cast<int32_t>(f.offset), n};
    if (comm) {
      a_->MovReg(R1, R10);
      a_->Alu(BPF_ADD, R1, cx_.scratch_off);
      a_->Mov(R2, static_cast<int32_t>(kFilterCommBytes));
      a_->Call(BPF_FUNC_get_current_comm);
      s = Bytes{R10, cx_.scratch_off, n};
    }
    Wrap(jump_on_match, target, [&](Label no) { StringMatchCode(p, s, no); });
    return Status::Ok();
  }

  // A __data_loc string: its first min(len, 32) bytes are copied to the scratch (zero-padded)
  // with probe_read_kernel from ctx + (loc & 0xffff) (a variable-offset pointer may be passed to
  // a helper, never dereferenced), then matched as the kernel's regex_match_full (strncmp over
  // len bytes) or regex_match_front (false when 0 < len < pattern) would. A length of 0 (a probe
  // string whose read faulted) is taken as the empty string; the kernel compares whatever bytes
  // sit at its offset up to a NUL.
  Status DataLocPredicate(const FilterPredicate& p, Label target, bool jump_if) {
    const FilterField& f = p.field;
    if (p.match != StringMatch::kFull && p.match != StringMatch::kPrefix) {
      return Unsupported(p, std::string(FilterFieldKindName(f.kind)) +
                                " fields take full matches and prefix patterns \"x*\" (suffix, substring and glob "
                                "patterns are not compiled: the string's length is read from the record)");
    }
    const size_t limit = p.match == StringMatch::kFull ? kScratchBytes - 1 : kScratchBytes;
    if (p.pattern.size() > limit) {
      return Unsupported(p, "a pattern of more than " + std::to_string(limit) + " bytes against a " +
                                FilterFieldKindName(f.kind) + " field");
    }
    if (const std::string problem = RecordFieldProblem(f, 4); !problem.empty()) return Unsupported(p, problem);
    const auto off = static_cast<int16_t>(f.offset);
    a_->ZeroStack(cx_.scratch_off, kScratchBytes);
    Label bounded = a_->NewLabel(), nonzero = a_->NewLabel();
    a_->Load(4, R3, cx_.ctx, off);
    a_->MovReg(R2, R3);
    a_->Alu(BPF_RSH, R2, 16);
    a_->Jump(BPF_JLE, R2, static_cast<int32_t>(kScratchBytes), bounded);
    a_->Mov(R2, static_cast<int32_t>(kScratchBytes));
    a_->Bind(bounded);
    a_->Alu(BPF_AND, R3, 0xffff);
    a_->AluReg(BPF_ADD, R3, cx_.ctx);
    a_->MovReg(R1, R10);
    a_->Alu(BPF_ADD, R1, cx_.scratch_off);
    a_->Call(BPF_FUNC_probe_read_kernel);
    a_->Load(4, R1, cx_.ctx, off);  // R1 = len
    a_->Alu(BPF_RSH, R1, 16);
    a_->Jump(BPF_JNE, R1, 0, nonzero);
    a_->Mov(R1, static_cast<int32_t>(2 * kScratchBytes));  // no length: the zeroed scratch decides
    a_->Bind(nonzero);
    const std::string& pat = p.pattern;
    Wrap(jump_if != p.invert, target, [&](Label no) {
      if (p.match == StringMatch::kPrefix) {
        // No length check: at most len bytes were copied, so a string shorter than the
        // pattern mismatches at its end (patterns hold no NUL).
        BytesEqual(Bytes{R10, cx_.scratch_off, kScratchBytes}, 0, pat, no);
        return;
      }
      Label match = a_->NewLabel();
      for (size_t i = 0; i <= pat.size(); ++i) {  // strncmp(s, pat, len) == 0
        a_->Jump(BPF_JLE, R1, static_cast<int32_t>(i), match);
        a_->Load(1, R0, R10, static_cast<int16_t>(cx_.scratch_off + static_cast<int32_t>(i)));
        a_->Jump(BPF_JNE, R0, i < pat.size() ? static_cast<uint8_t>(pat[i]) : 0, no);
      }
      a_->Bind(match);
    });
    return Status::Ok();
  }

  Status Predicate(const FilterPredicate& p, Label target, bool jump_if) {
    const FilterField& f = p.field;
    if (f.kind == FilterFieldKind::kInteger && f.offset < kRegsSlotBytes && !IsCommonPid(f)) {
      return Unsupported(p, RecordFieldProblem(f, f.size));
    }
    switch (f.kind) {
      case FilterFieldKind::kInteger:
      case FilterFieldKind::kCpu:
        TPE_RETURN_IF_ERROR(CheckScalar(p));
        if (p.operand == FilterOperand::kCpus) {
          if (p.cpus.empty()) return Unsupported(p, "empty CPU list");
          CpusCompare(p, target, jump_if);
          return Status::Ok();
        }
        if (p.operand != FilterOperand::kInteger || p.op == FilterOp::kGlob) {
          return Unsupported(p, "an integer field compares with a number or CPUS{...}");
        }
        IntegerCompare(p, target, jump_if);
        return Status::Ok();
      case FilterFieldKind::kCharArray:
      case FilterFieldKind::kComm:
        if (p.operand != FilterOperand::kString) return Unsupported(p, "a string field compares with a string");
        return StringPredicate(p, target, jump_if);
      case FilterFieldKind::kDataLocString:
        if (p.operand != FilterOperand::kString) return Unsupported(p, "a string field compares with a string");
        TPE_RETURN_IF_ERROR(CheckStringMatch(p, kScratchBytes));
        return DataLocPredicate(p, target, jump_if);
      case FilterFieldKind::kRelLocString:
        return Unsupported(p, std::string(FilterFieldKindName(f.kind)) +
                                  " fields are not supported yet: the string sits at an offset relative to the field");
      case FilterFieldKind::kStringPointer:
        return Unsupported(p, "char * fields are not supported: the string lives outside the record (" +
                                  std::string(f.user_string ? "user" : "kernel") + " memory)");
      case FilterFieldKind::kCpumask:
        return Unsupported(p, "cpumask fields are not supported: the mask sits at an offset read from the record");
    }
    return Unsupported(p, "unknown field kind");
  }

  const FilterCodeContext& cx_;
  Assembler* a_;
};

Status CheckContext(const FilterCodeContext& cx) {
  if (cx.ctx < R6 || cx.ctx > R9) {
    return InvalidArgument("filter code: the ctx register must be one of R6-R9 (helper calls clobber R1-R5), not R" +
                           std::to_string(static_cast<int>(cx.ctx)));
  }
  if (cx.scratch_off < -512 || cx.scratch_off + static_cast<int>(kScratchBytes) > 0) {
    return InvalidArgument("filter code: scratch_off " + std::to_string(cx.scratch_off) +
                           " does not leave 32 bytes inside the 512-byte stack");
  }
  return Status::Ok();
}

Status CompileInto(const FilterExpr& expr, const FilterCodeContext& cx, Assembler* a, Label on_false) {
  TPE_RETURN_IF_ERROR(CheckContext(cx));
  Compiler c(cx, a);
  FilterExpr folded = expr;
  if (std::optional<bool> whole = Compiler::Fold(&folded)) {
    c.Constant(*whole, on_false, false);
    return Status::Ok();
  }
  return c.Jump(folded, on_false, false);
}

}  // namespace

Status CheckFilterCompiles(const FilterExpr& expr) {
  Assembler scratch;
  return CompileInto(expr, FilterCodeContext{}, &scratch, scratch.NewLabel());
}

Status CompileFilter(const FilterExpr& expr, const FilterCodeContext& cx, Assembler* a, Label on_false) {
  {  // A dry run first, so nothing is emitted on error.
    Assembler scratch;
    TPE_RETURN_IF_ERROR(CompileInto(expr, cx, &scratch, scratch.NewLabel()));
  }
  return CompileInto(expr, cx, a, on_false);
}

}  // namespace tpe::bpf
