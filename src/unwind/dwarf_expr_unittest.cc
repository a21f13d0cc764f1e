#include "unwind/dwarf_expr.h"

#include <dwarf.h>
#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace tpe::unwind {
namespace {

Dwarf_Op Op(uint8_t atom, uint64_t number = 0, uint64_t number2 = 0) { return Dwarf_Op{atom, number, number2, 0}; }

const ReadMemory kNoMemory = [](uint64_t, uint64_t*) { return false; };

TEST(DwarfExprTest, RegisterPlusOffsetIsTheUsualCfa) {
  Registers r;
  r.Set(kDwarfRsp, 0x7ffc0000);
  const std::vector<Dwarf_Op> ops = {Op(DW_OP_bregx, kDwarfRsp, 16)};
  auto v = Evaluate(ops, r, std::nullopt, kNoMemory);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->value, 0x7ffc0010u);
  EXPECT_FALSE(v->is_value);
  r.Forget(kDwarfRsp);
  EXPECT_FALSE(Evaluate(ops, r, std::nullopt, kNoMemory)) << "an unknown register";
}

// The PLT's CFA (glibc's and binutils' .plt CFI): rsp + 8, and 8 more past the push in a PLT
// entry's second half: rsp + 8 + (((rip & 15) >= 11) << 3).
TEST(DwarfExprTest, ThePltCfaExpression) {
  const std::vector<Dwarf_Op> ops = {Op(DW_OP_breg7, 8), Op(DW_OP_breg16, 0), Op(DW_OP_lit15),
                                     Op(DW_OP_and),      Op(DW_OP_lit11),     Op(DW_OP_ge),
                                     Op(DW_OP_lit3),     Op(DW_OP_shl),       Op(DW_OP_plus)};
  Registers r;
  r.Set(kDwarfRsp, 0x1000);
  r.Set(kDwarfRip, 0x401020 + 6);  // before the push
  EXPECT_EQ(Evaluate(ops, r, std::nullopt, kNoMemory)->value, 0x1008u);
  r.Set(kDwarfRip, 0x401020 + 11);  // after it
  EXPECT_EQ(Evaluate(ops, r, std::nullopt, kNoMemory)->value, 0x1010u);
}

// Register rules as libdw gives them: saved at CFA + n (an address), a value CFA + n
// (DW_OP_stack_value), another register; DW_OP_deref reads memory.
TEST(DwarfExprTest, RegisterRulesAndMemory) {
  std::map<uint64_t, uint64_t> memory = {{0x2000, 0xabc}};
  const ReadMemory read = [&](uint64_t a, uint64_t* v) {
    auto it = memory.find(a);
    if (it == memory.end()) return false;
    *v = it->second;
    return true;
  };
  Registers r;
  r.Set(kDwarfRbx, 77);
  auto saved =
      Evaluate(std::vector<Dwarf_Op>{Op(DW_OP_call_frame_cfa), Op(DW_OP_plus_uconst, uint64_t(-16))}, r, 0x2010, read);
  ASSERT_TRUE(saved);
  EXPECT_EQ(saved->value, 0x2000u);
  EXPECT_FALSE(saved->is_value);
  auto value =
      Evaluate(std::vector<Dwarf_Op>{Op(DW_OP_call_frame_cfa), Op(DW_OP_plus_uconst, 8), Op(DW_OP_stack_value)}, r,
               0x2010, read);
  ASSERT_TRUE(value);
  EXPECT_TRUE(value->is_value);
  EXPECT_EQ(value->value, 0x2018u);
  auto in_reg = Evaluate(std::vector<Dwarf_Op>{Op(DW_OP_regx, kDwarfRbx)}, r, 0x2010, read);
  ASSERT_TRUE(in_reg);
  EXPECT_TRUE(in_reg->is_value);
  EXPECT_EQ(in_reg->value, 77u);
  EXPECT_EQ(Evaluate(std::vector<Dwarf_Op>{Op(DW_OP_lit0), Op(DW_OP_const2u, 0x2000), Op(DW_OP_plus), Op(DW_OP_deref)},
                     r, std::nullopt, read)
                ->value,
            0xabcu);
  EXPECT_FALSE(Evaluate(std::vector<Dwarf_Op>{Op(DW_OP_lit1), Op(DW_OP_deref)}, r, std::nullopt, read))
      << "a read outside the copy";
  EXPECT_FALSE(Evaluate(std::vector<Dwarf_Op>{Op(DW_OP_call_frame_cfa)}, r, std::nullopt, read))
      << "no CFA while computing the CFA";
  EXPECT_FALSE(Evaluate(std::vector<Dwarf_Op>{Op(DW_OP_plus)}, r, std::nullopt, read)) << "underflow";
  EXPECT_FALSE(Evaluate(std::vector<Dwarf_Op>{Op(DW_OP_lit1), Op(DW_OP_bra, 2)}, r, std::nullopt, read))
      << "branches are refused";
  EXPECT_FALSE(Evaluate(std::vector<Dwarf_Op>{}, r, std::nullopt, read));
}

}  // namespace
}  // namespace tpe::unwind
