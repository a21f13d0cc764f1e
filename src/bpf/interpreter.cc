#include "bpf/interpreter.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace tpe::bpf {
namespace {

constexpr uint64_t kMaxSteps = 1'000'000;
constexpr size_t kStackBytes = 512;
constexpr int kTagShift = 48;
constexpr uint64_t kOffsetMask = (uint64_t{1} << kTagShift) - 1;
// Region tags (the top 16 bits of a pointer). Map values get kValueTagBase + an index.
constexpr uint64_t kCtxTag = 0xB001;
constexpr uint64_t kStackTag = 0xB002;
constexpr uint64_t kMapTag = 0xB003;
constexpr uint64_t kValueTagBase = 0xB100;
constexpr uint64_t kValueTagLast = 0xBFFF;
constexpr uint64_t kPoison = 0xdead'beef'dead'beefULL;

uint64_t MakePtr(uint64_t tag, uint64_t off) { return tag << kTagShift | (off & kOffsetMask); }

bool IsArray(uint32_t type) { return type == BPF_MAP_TYPE_ARRAY || type == BPF_MAP_TYPE_PERCPU_ARRAY; }

std::string U32Key(uint32_t i) {
  std::string k(4, '\0');
  std::memcpy(k.data(), &i, 4);
  return k;
}

uint64_t Neg(int e) { return static_cast<uint64_t>(-static_cast<int64_t>(e)); }
// What R0 holds after a map op that returns an int, as before Linux 6.4 (see the header).
uint64_t IntReturn(uint64_t ret) { return static_cast<uint32_t>(ret); }

class Machine {
 public:
  Machine(std::map<int, FakeMap>* maps, std::string_view record, const FakeTask& task, const BeforeHelper& hook,
          const AfterValueStore& store_hook, const std::map<uint64_t, std::string>* user, bool regs_ctx)
      : maps_(maps),
        ctx_(record),
        stack_(kStackBytes, '\0'),
        task_(task),
        hook_(hook),
        store_hook_(store_hook),
        user_(user),
        regs_ctx_(regs_ctx) {}

  StatusOr<uint64_t> Exec(const std::vector<bpf_insn>& insns);

 private:
  // Bytes [addr, addr+size) of a region, or null. `write`: refuse read-only memory (ctx).
  uint8_t* Resolve(uint64_t addr, uint64_t size, bool write);
  Status Fail(const std::string& what) const {
    return InvalidArgument("BPF instruction " + std::to_string(pc_) + ": " + what);
  }
  Status Access(uint64_t addr, uint64_t size, bool write, uint8_t** out) {
    *out = Resolve(addr, size, write);
    if (*out == nullptr) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(addr));
      return Fail(std::string("bad memory ") + (write ? "write" : "read") + " of " + std::to_string(size) +
                  " bytes at " + buf);
    }
    return Status::Ok();
  }
  Status CallHelper(int32_t id);
  // Bytes [addr, addr+size) of the probed process's memory (Interpreter::AddUserMemory), or null.
  const uint8_t* ResolveUser(uint64_t addr, uint64_t size) const;
  StatusOr<FakeMap*> MapArg(uint64_t v);

  std::map<int, FakeMap>* maps_;
  std::string ctx_;
  std::string stack_;
  const FakeTask& task_;
  const BeforeHelper& hook_;
  const AfterValueStore& store_hook_;
  const std::map<uint64_t, std::string>* user_;  // base address -> bytes
  bool regs_ctx_;                                // ctx is a struct pt_regs (a kprobe program)
  uint64_t r_[11] = {};
  size_t pc_ = 0;
  // Map value regions handed out by lookups: (fd, key).
  std::vector<std::pair<int, std::string>> values_;
  std::map<std::pair<int, std::string>, size_t> value_index_;
};

uint8_t* Machine::Resolve(uint64_t addr, uint64_t size, bool write) {
  const uint64_t tag = addr >> kTagShift, off = addr & kOffsetMask;
  std::string* mem = nullptr;
  if (tag == kCtxTag) {
    if (write) return nullptr;
    mem = &ctx_;
  } else if (tag == kStackTag) {
    mem = &stack_;
  } else if (tag >= kValueTagBase && tag <= kValueTagLast && tag - kValueTagBase < values_.size()) {
    const auto& [fd, key] = values_[tag - kValueTagBase];
    auto m = maps_->find(fd);
    if (m == maps_->end()) return nullptr;
    if (write && m->second.values_read_only) return nullptr;
    auto e = m->second.entries.find(key);
    if (e == m->second.entries.end()) return nullptr;  // deleted since the lookup
    mem = &e->second;
  } else {
    return nullptr;
  }
  if (off > mem->size() || mem->size() - off < size) return nullptr;
  return reinterpret_cast<uint8_t*>(mem->data()) + off;
}

const uint8_t* Machine::ResolveUser(uint64_t addr, uint64_t size) const {
  auto it = user_->upper_bound(addr);
  if (it == user_->begin()) return nullptr;
  --it;
  const uint64_t off = addr - it->first;
  if (off > it->second.size() || it->second.size() - off < size) return nullptr;
  return reinterpret_cast<const uint8_t*>(it->second.data()) + off;
}

StatusOr<FakeMap*> Machine::MapArg(uint64_t v) {
  if (v >> kTagShift != kMapTag) return Fail("helper argument R1 is not a map");
  auto m = maps_->find(static_cast<int>(static_cast<uint32_t>(v)));
  if (m == maps_->end()) return Fail("map fd " + std::to_string(static_cast<uint32_t>(v)) + " is gone");
  return &m->second;
}

Status Machine::CallHelper(int32_t id) {
  if (hook_) hook_(id);
  uint64_t ret = 0;
  switch (id) {
    case BPF_FUNC_map_lookup_elem: {
      TPE_ASSIGN_OR_RETURN(FakeMap * m, MapArg(r_[1]));
      uint8_t* k = nullptr;
      TPE_RETURN_IF_ERROR(Access(r_[2], m->key_size, false, &k));
      std::string key(reinterpret_cast<char*>(k), m->key_size);
      if (m->entries.count(key) != 0) {
        const int fd = static_cast<int>(static_cast<uint32_t>(r_[1]));
        auto [it, inserted] = value_index_.emplace(std::make_pair(fd, key), values_.size());
        if (inserted) {
          if (values_.size() > kValueTagLast - kValueTagBase) return Fail("too many map values looked up");
          values_.emplace_back(fd, key);
        }
        ret = MakePtr(kValueTagBase + it->second, 0);
      }
      break;
    }
    case BPF_FUNC_map_update_elem: {
      TPE_ASSIGN_OR_RETURN(FakeMap * m, MapArg(r_[1]));
      uint8_t *k = nullptr, *v = nullptr;
      TPE_RETURN_IF_ERROR(Access(r_[2], m->key_size, false, &k));
      TPE_RETURN_IF_ERROR(Access(r_[3], m->value_size, false, &v));
      const uint64_t flags = r_[4];
      std::string key(reinterpret_cast<char*>(k), m->key_size);
      std::string value(reinterpret_cast<char*>(v), m->value_size);
      const bool exists = m->entries.count(key) != 0;
      if (flags > BPF_EXIST) {
        ret = Neg(EINVAL);
      } else if (IsArray(m->type)) {
        uint32_t index = 0;
        std::memcpy(&index, key.data(), std::min<size_t>(4, key.size()));
        if (index >= m->max_entries) {
          ret = Neg(E2BIG);
        } else if (flags == BPF_NOEXIST) {
          ret = Neg(EEXIST);
        } else {
          m->entries[key] = value;
        }
      } else if (exists && flags == BPF_NOEXIST) {
        ret = Neg(EEXIST);
      } else if (!exists && flags == BPF_EXIST) {
        ret = Neg(ENOENT);
      } else if (!exists && m->entries.size() >= m->max_entries) {
        ret = Neg(E2BIG);
      } else if (!exists && m->insert_errno != 0) {
        ret = Neg(m->insert_errno);
      } else {
        m->entries[key] = value;
      }
      ret = IntReturn(ret);
      break;
    }
    case BPF_FUNC_map_delete_elem: {
      TPE_ASSIGN_OR_RETURN(FakeMap * m, MapArg(r_[1]));
      uint8_t* k = nullptr;
      TPE_RETURN_IF_ERROR(Access(r_[2], m->key_size, false, &k));
      std::string key(reinterpret_cast<char*>(k), m->key_size);
      if (IsArray(m->type)) {
        ret = Neg(EINVAL);
      } else {
        ret = m->entries.erase(key) != 0 ? 0 : Neg(ENOENT);
      }
      ret = IntReturn(ret);
      break;
    }
    case BPF_FUNC_get_current_pid_tgid:
      ret = uint64_t{task_.pid} << 32 | task_.tid;
      break;
    case BPF_FUNC_get_current_comm: {
      const uint64_t size = r_[2];
      if (size == 0) return Fail("get_current_comm with size 0");
      uint8_t* buf = nullptr;
      TPE_RETURN_IF_ERROR(Access(r_[1], size, true, &buf));
      // task->comm holds at most TASK_COMM_LEN - 1 bytes; strscpy_pad copies at most size-1.
      size_t n = 0;
      while (n < task_.comm.size() && n < 15 && task_.comm[n] != '\0') ++n;
      n = std::min<size_t>(n, size - 1);
      std::memset(buf, 0, size);
      std::memcpy(buf, task_.comm.data(), n);
      break;
    }
    case BPF_FUNC_get_smp_processor_id:
      ret = task_.cpu;
      break;
    case BPF_FUNC_ktime_get_ns:
      ret = task_.ktime_ns;
      break;
    case BPF_FUNC_get_current_cgroup_id:
      ret = task_.cgroup_id;
      break;
    case BPF_FUNC_get_stackid: {
      TPE_RETURN_IF_ERROR(MapArg(r_[2]).status());
      ret = static_cast<uint64_t>((r_[3] & BPF_F_USER_STACK) != 0 ? task_.user_stack_id : task_.kernel_stack_id);
      break;
    }
    case BPF_FUNC_probe_read_kernel:
    case BPF_FUNC_probe_read_kernel_str:
    case BPF_FUNC_probe_read_user:
    case BPF_FUNC_probe_read_user_str: {
      const bool user = id == BPF_FUNC_probe_read_user || id == BPF_FUNC_probe_read_user_str;
      auto src_at = [&](uint64_t addr, uint64_t n) { return user ? ResolveUser(addr, n) : Resolve(addr, n, false); };
      const uint64_t size = static_cast<uint32_t>(r_[2]);
      uint8_t* dst = nullptr;
      if (size != 0) TPE_RETURN_IF_ERROR(Access(r_[1], size, true, &dst));
      if (id == BPF_FUNC_probe_read_kernel || id == BPF_FUNC_probe_read_user) {
        const uint8_t* src = size == 0 ? nullptr : src_at(r_[3], size);
        if (size != 0 && src == nullptr) {
          std::memset(dst, 0, size);
          ret = Neg(EFAULT);
        } else if (size != 0) {
          std::memmove(dst, src, size);
        }
        break;
      }
      if (size == 0) break;  // strncpy_from_kernel_nofault with count 0 returns 0
      std::string copy;
      bool fault = false;
      for (;;) {
        if (copy.size() == size - 1) {
          copy.push_back('\0');
          break;
        }
        const uint8_t* c = src_at(r_[3] + copy.size(), 1);
        if (c == nullptr) {
          fault = true;
          break;
        }
        copy.push_back(static_cast<char>(*c));
        if (*c == 0) break;
      }
      if (fault) {
        std::memset(dst, 0, size);
        ret = Neg(EFAULT);
      } else {
        std::memcpy(dst, copy.data(), copy.size());
        ret = copy.size();
      }
      break;
    }
    default:
      return Fail("unknown helper " + std::to_string(id));
  }
  r_[0] = ret;
  for (int i = 1; i <= 5; ++i) r_[i] = kPoison;
  return Status::Ok();
}

uint64_t LoadLE(const uint8_t* p, uint32_t size) {
  uint64_t v = 0;
  std::memcpy(&v, p, size);  // little-endian host (x86_64, arm64)
  return v;
}
void StoreLE(uint8_t* p, uint32_t size, uint64_t v) { std::memcpy(p, &v, size); }

uint32_t SizeBytes(uint8_t code) {
  switch (BPF_SIZE(code)) {
    case BPF_B:
      return 1;
    case BPF_H:
      return 2;
    case BPF_W:
      return 4;
    default:
      return 8;
  }
}

// dst <op> src for ALU64 (`wide`) or ALU (32-bit, zero-extended). False: unknown op.
bool AluOp(uint8_t op, bool wide, uint64_t* dst, uint64_t src) {
  if (wide) {
    uint64_t& d = *dst;
    switch (op) {
      case BPF_ADD:
        d += src;
        return true;
      case BPF_SUB:
        d -= src;
        return true;
      case BPF_MUL:
        d *= src;
        return true;
      case BPF_DIV:
        d = src == 0 ? 0 : d / src;
        return true;
      case BPF_MOD:
        d = src == 0 ? d : d % src;
        return true;
      case BPF_OR:
        d |= src;
        return true;
      case BPF_AND:
        d &= src;
        return true;
      case BPF_XOR:
        d ^= src;
        return true;
      case BPF_LSH:
        d <<= (src & 63);
        return true;
      case BPF_RSH:
        d >>= (src & 63);
        return true;
      case BPF_ARSH:
        d = static_cast<uint64_t>(static_cast<int64_t>(d) >> (src & 63));
        return true;
      case BPF_NEG:
        d = ~d + 1;
        return true;
      case BPF_MOV:
        d = src;
        return true;
      default:
        return false;
    }
  }
  uint32_t d = static_cast<uint32_t>(*dst);
  const uint32_t s = static_cast<uint32_t>(src);
  switch (op) {
    case BPF_ADD:
      d += s;
      break;
    case BPF_SUB:
      d -= s;
      break;
    case BPF_MUL:
      d *= s;
      break;
    case BPF_DIV:
      d = s == 0 ? 0 : d / s;
      break;
    case BPF_MOD:
      d = s == 0 ? d : d % s;
      break;
    case BPF_OR:
      d |= s;
      break;
    case BPF_AND:
      d &= s;
      break;
    case BPF_XOR:
      d ^= s;
      break;
    case BPF_LSH:
      d <<= (s & 31);
      break;
    case BPF_RSH:
      d >>= (s & 31);
      break;
    case BPF_ARSH:
      d = static_cast<uint32_t>(static_cast<int32_t>(d) >> (s & 31));
      break;
    case BPF_NEG:
      d = ~d + 1;
      break;
    case BPF_MOV:
      d = s;
      break;
    default:
      return false;
  }
  *dst = d;
  return true;
}

// The condition of a conditional jump; *known false for an unknown op.
bool JumpTaken(uint8_t op, bool wide, uint64_t a, uint64_t b, bool* known) {
  *known = true;
  if (!wide) {
    a = static_cast<uint32_t>(a);
    b = static_cast<uint32_t>(b);
  }
  const int64_t sa = wide ? static_cast<int64_t>(a) : static_cast<int32_t>(a);
  const int64_t sb = wide ? static_cast<int64_t>(b) : static_cast<int32_t>(b);
  switch (op) {
    case BPF_JEQ:
      return a == b;
    case BPF_JNE:
      return a != b;
    case BPF_JGT:
      return a > b;
    case BPF_JGE:
      return a >= b;
    case BPF_JLT:
      return a < b;
    case BPF_JLE:
      return a <= b;
    case BPF_JSET:
      return (a & b) != 0;
    case BPF_JSGT:
      return sa > sb;
    case BPF_JSGE:
      return sa >= sb;
    case BPF_JSLT:
      return sa < sb;
    case BPF_JSLE:
      return sa <= sb;
    default:
      *known = false;
      return false;
  }
}

StatusOr<uint64_t> Machine::Exec(const std::vector<bpf_insn>& insns) {
  r_[1] = MakePtr(kCtxTag, 0);
  r_[10] = MakePtr(kStackTag, kStackBytes);
  uint64_t steps = 0;
  pc_ = 0;
  for (;;) {
    if (pc_ >= insns.size()) return Fail("execution ran past the end of the program");
    if (++steps > kMaxSteps) return Fail("more than 1000000 instructions executed");
    const bpf_insn& in = insns[pc_];
    const uint8_t cls = BPF_CLASS(in.code);
    if (in.dst_reg > 10 || in.src_reg > 10) return Fail("bad register");
    // R10 is read-only except as the base of a memory access.
    const bool writes_dst = cls == BPF_ALU || cls == BPF_ALU64 || cls == BPF_LDX || cls == BPF_LD;
    if (writes_dst && in.dst_reg == 10) return Fail("R10 is read-only");
    uint64_t& dst = r_[in.dst_reg];
    const uint64_t src = r_[in.src_reg];
    const uint64_t imm = static_cast<uint64_t>(static_cast<int64_t>(in.imm));
    size_t next = pc_ + 1;
    switch (cls) {
      case BPF_ALU:
      case BPF_ALU64: {
        if (in.off != 0) return Fail("signed division / sign-extending moves are not supported");
        const uint8_t op = BPF_OP(in.code);
        if (op == BPF_END) return Fail("byte swaps are not supported");
        const uint64_t operand = BPF_SRC(in.code) == BPF_X ? src : imm;
        if (!AluOp(op, cls == BPF_ALU64, &dst, operand)) return Fail("unknown ALU op");
        break;
      }
      case BPF_LD: {
        if (in.code != (BPF_LD | BPF_DW | BPF_IMM)) return Fail("unsupported BPF_LD mode");
        if (pc_ + 1 >= insns.size()) return Fail("LD_IMM64 without its second half");
        const bpf_insn& hi = insns[pc_ + 1];
        if (in.src_reg == 0) {
          dst = static_cast<uint32_t>(in.imm) | uint64_t{static_cast<uint32_t>(hi.imm)} << 32;
        } else if (in.src_reg == BPF_PSEUDO_MAP_FD) {
          if (maps_->count(in.imm) == 0) return Fail("unknown map fd " + std::to_string(in.imm));
          dst = MakePtr(kMapTag, static_cast<uint32_t>(in.imm));
        } else {
          return Fail("unsupported LD_IMM64 source " + std::to_string(in.src_reg));
        }
        next = pc_ + 2;
        break;
      }
      case BPF_LDX: {
        if (BPF_MODE(in.code) != BPF_MEM) return Fail("unsupported BPF_LDX mode");
        const uint32_t size = SizeBytes(in.code);
        const uint64_t addr = src + static_cast<uint64_t>(static_cast<int64_t>(in.off));
        if (addr >> kTagShift == kCtxTag && regs_ctx_) {
          // kprobe_prog_is_valid_access: inside struct pt_regs (Resolve checks), aligned.
          if ((addr & kOffsetMask) % size != 0) return Fail("misaligned pt_regs read");
        } else if (addr >> kTagShift == kCtxTag) {
          // tp_prog_is_valid_access: the first 8 bytes hold a pt_regs pointer; aligned reads only.
          const uint64_t off = addr & kOffsetMask;
          if (off < 8) return Fail("ctx read at offset " + std::to_string(off) + " (below 8: the pt_regs pointer)");
          if (off % size != 0)
            return Fail("misaligned ctx read of " + std::to_string(size) + " bytes at offset " + std::to_string(off));
        }
        uint8_t* p = nullptr;
        TPE_RETURN_IF_ERROR(Access(addr, size, false, &p));
        dst = LoadLE(p, size);
        break;
      }
      case BPF_ST:
      case BPF_STX: {
        const uint32_t size = SizeBytes(in.code);
        uint8_t* p = nullptr;
        TPE_RETURN_IF_ERROR(Access(dst + static_cast<uint64_t>(static_cast<int64_t>(in.off)), size, true, &p));
        if (BPF_MODE(in.code) == BPF_MEM) {
          StoreLE(p, size, cls == BPF_ST ? imm : src);
        } else if (cls == BPF_STX && BPF_MODE(in.code) == BPF_ATOMIC && (size == 4 || size == 8) &&
                   (in.imm == BPF_ADD || in.imm == (BPF_ADD | BPF_FETCH))) {
          const uint64_t old = LoadLE(p, size);
          StoreLE(p, size, old + src);
          if (in.imm & BPF_FETCH) r_[in.src_reg] = size == 4 ? static_cast<uint32_t>(old) : old;
        } else if (cls == BPF_STX && BPF_MODE(in.code) == BPF_ATOMIC && size == 8 && in.imm == BPF_XCHG) {
          const uint64_t old = LoadLE(p, size);
          StoreLE(p, size, src);
          r_[in.src_reg] = old;
        } else {
          return Fail("unsupported store mode");
        }
        if (const uint64_t tag = dst >> kTagShift;
            store_hook_ && tag >= kValueTagBase && tag <= kValueTagLast && tag - kValueTagBase < values_.size()) {
          const auto& [fd, key] = values_[tag - kValueTagBase];
          store_hook_(fd, key);
        }
        break;
      }
      case BPF_JMP:
      case BPF_JMP32: {
        const uint8_t op = BPF_OP(in.code);
        if (op == BPF_EXIT && cls == BPF_JMP) return r_[0];
        if (op == BPF_CALL && cls == BPF_JMP) {
          if (in.src_reg != 0) return Fail("only helper calls are supported");
          TPE_RETURN_IF_ERROR(CallHelper(in.imm));
          break;
        }
        bool taken = false;
        if (op == BPF_JA && cls == BPF_JMP) {
          taken = true;
        } else {
          bool known = false;
          taken = JumpTaken(op, cls == BPF_JMP, dst, BPF_SRC(in.code) == BPF_X ? src : imm, &known);
          if (!known) return Fail("unknown jump op");
        }
        if (taken) {
          const int64_t target = static_cast<int64_t>(pc_) + 1 + in.off;
          if (target < 0 || static_cast<size_t>(target) >= insns.size()) return Fail("jump out of the program");
          next = static_cast<size_t>(target);
        }
        break;
      }
      default:
        return Fail("unknown instruction class");
    }
    pc_ = next;
  }
}

}  // namespace

void Interpreter::AddMap(int fd, FakeMap map) {
  if (IsArray(map.type)) {
    for (uint32_t i = 0; i < map.max_entries; ++i) {
      map.entries.emplace(U32Key(i), std::string(map.value_size, '\0'));
    }
  }
  maps_[fd] = std::move(map);
}

FakeMap* Interpreter::map(int fd) {
  auto it = maps_.find(fd);
  return it == maps_.end() ? nullptr : &it->second;
}

StatusOr<uint64_t> Interpreter::Run(const std::vector<bpf_insn>& insns, std::string_view record, const FakeTask& task) {
  Machine m(&maps_, record, task, before_helper_, after_value_store_, &user_memory_, false);
  return m.Exec(insns);
}

StatusOr<uint64_t> Interpreter::RunKprobe(const std::vector<bpf_insn>& insns, const std::vector<uint64_t>& regs,
                                          const FakeTask& task) {
  std::string ctx(regs.size() * 8, '\0');
  if (!regs.empty()) std::memcpy(ctx.data(), regs.data(), ctx.size());
  Machine m(&maps_, ctx, task, before_helper_, after_value_store_, &user_memory_, true);
  return m.Exec(insns);
}

void Interpreter::AddUserMemory(uint64_t addr, std::string bytes) { user_memory_[addr] = std::move(bytes); }

}  // namespace tpe::bpf
