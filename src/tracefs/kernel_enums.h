// Values of the running kernel's enum constants (e.g. TCP_ESTABLISHED = 1), read from kernel
// BTF at /sys/kernel/btf/vmlinux with libbpf. Used only to complete __print_symbolic tables whose
// format file prints enum names instead of numbers; BTF is optional: without it those entries
// stay unresolved and labels show the number.
//
// Thread-safety: Lookup is const and safe from any thread once constructed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tpe {

class KernelEnums {
 public:
  // Loads every enumerator of the kernel's BTF (a few ms). `available()` is false when the
  // kernel has no BTF or it cannot be read; Lookup then always returns nullopt.
  static KernelEnums LoadFromKernel();
  // For tests: an explicit table.
  explicit KernelEnums(std::unordered_map<std::string, int64_t> values = {}) : values_(std::move(values)) {}

  bool available() const { return !values_.empty(); }
  std::optional<int64_t> Lookup(std::string_view name) const;

 private:
  std::unordered_map<std::string, int64_t> values_;
};

}  // namespace tpe
