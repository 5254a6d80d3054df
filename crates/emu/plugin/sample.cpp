// pmlab's sampling pass: an LLVM pass plugin (new pass manager, LLVM 14)
// loaded by `pmlab cc` / `pmlab c++` with -fpass-plugin=FILE.
//
// Every function with loads or stores gets two copies of its body in the
// same function: the *clean* copy (the optimized code, untouched but for a
// countdown check at the function's entry and on every loop back-edge) and
// the *instrumented* copy (the same blocks with a call to
// __sanitizer_cov_{load,store}{1,2,4,8,16} before each load and store of
// those sizes, the ABI of clang's -fsanitize-coverage=trace-loads,
// trace-stores). The checks decrement a per-thread countdown; when it runs
// out, __pmlab_sample_switch3 (libpmlab) says which copy runs next and sets
// the next countdown. This is the framework of Arnold and Ryder (PLDI 2001)
// for reducing the cost of instrumented code.
//
// The pass runs last in the optimization pipeline (as sanitizer coverage
// does), so the clean copy is the code the compiler would emit without
// pmlab and the instrumented copy hooks the same accesses sanitizer coverage
// would hook. To clone blocks and jump between the copies freely, values
// that live across blocks are first demoted to stack slots; after cloning
// and wiring, those slots are promoted back to registers (mem2reg).
//
// The per-thread state is a hidden, linkonce_odr thread-local triple of
// i64 (one per executable or shared object):
//   state[0]: countdown of the clean copy's checks (the gap);
//   state[1]: countdown of the instrumented copy's checks (the window);
//   state[2]: non-zero while a window is open.
// A check in the clean copy is `if (--state[0] <= 0) switch` (on loop
// back-edges with the count kept in a register and written to memory
// every few checks: see cleanEdge): on a back-edge a non-zero answer jumps
// to the instrumented copy of the loop's header. A check in the instrumented copy is `if (--state[1] <= 0)
// switch`; a zero answer jumps back to the clean copy.
//
// At entry, a function first tests state[2]: in a window it runs its
// instrumented copy without asking (a callee of code in a window is in the
// window too). Only functions with loops or calls count checks at entry
// (the clean countdown in a gap, the window's in a window); a *leaf*
// without loops (no calls but to intrinsics), such as a sort's comparison
// function, only tests the flag: its accesses are covered by the windows
// of its callers, and it costs one thread-local load per call.
//
// Functions that cannot be cloned safely (Windows funclet exception pads,
// callbr, indirectbr, musttail calls, returns_twice calls such as
// setjmp, token values, addresses of blocks taken, or more than
// kMaxInstructions instructions) are left as one copy with every access
// hooked, i.e. as sanitizer coverage would build them.
//
// Two kinds of code get no hooks in either copy: loads and stores of the
// function's private stack slots (small, never escaping: `privateSlots`;
// PMLAB_SAMPLE_HOOK_STACK=1 hooks them too), and compares that cannot test
// a value loaded in the current iteration of their loop (`wantsCmpHook`).
// A load followed in its block by a store to the same address (a counter's
// `x[i] += v`, a chase whose state lives in memory) gets one hook, an
// *update* (`__pmlab_cov_update{1,2,4,8,16}`: the load's value and the
// store's dirty bit in one call), and the store none (`mergedAccesses`;
// PMLAB_SAMPLE_MERGE=0 hooks both).
//
// PMLAB_SAMPLE_PASS_DEBUG=1 in the compiler's environment prints one line
// per function saying what the pass did; =2 also one line per integer
// compare, hooked or skipped.

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Analysis/CaptureTracking.h"
#include "llvm/Analysis/LoopInfo.h"
#include "llvm/Analysis/ValueTracking.h"
#include "llvm/IR/Dominators.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/MDBuilder.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/PassManager.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Passes/PassPlugin.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Transforms/Utils/BasicBlockUtils.h"
#include "llvm/Transforms/Utils/Cloning.h"
#include "llvm/Transforms/Utils/Local.h"
#include "llvm/Transforms/Utils/PromoteMemToReg.h"
#include "llvm/Transforms/Utils/ValueMapper.h"

#include <algorithm>
#include <cstdlib>

using namespace llvm;

namespace {

// Functions larger than this stay fully instrumented (cloning doubles them).
constexpr unsigned kMaxInstructions = 20000;

// Versioned names: a program built with an older plugin (a pair of
// countdowns, no flag) never meets this runtime's switch.
const char *const kStateName = "__pmlab_sample_state3";
const char *const kSwitchName = "__pmlab_sample_switch3";

bool debugOn() {
  const char *v = std::getenv("PMLAB_SAMPLE_PASS_DEBUG");
  return v && *v && *v != '0';
}

// PMLAB_SAMPLE_HOOK_STACK=1 hooks the private stack slots too
// (`privateSlots`), as full instrumentation does.
bool hookStack() {
  const char *v = std::getenv("PMLAB_SAMPLE_HOOK_STACK");
  return v && *v && *v != '0';
}

// PMLAB_SAMPLE_MERGE=0 hooks a load and the store that follows it to the
// same address separately (`mergedAccesses`).
bool mergeOn() {
  const char *v = std::getenv("PMLAB_SAMPLE_MERGE");
  return !(v && *v == '0');
}

// PMLAB_SAMPLE_PASS_DEBUG=2 also prints each compare's choice.
bool debugCompares() {
  const char *v = std::getenv("PMLAB_SAMPLE_PASS_DEBUG");
  return v && *v == '2';
}

// Index of the callback for an access of `bytes` bytes, -1 for none
// (sanitizer coverage hooks only these sizes).
int sizeIndex(uint64_t bytes) {
  switch (bytes) {
  case 1:
    return 0;
  case 2:
    return 1;
  case 4:
    return 2;
  case 8:
    return 3;
  case 16:
    return 4;
  default:
    return -1;
  }
}

struct Hooks {
  FunctionCallee load[5];
  FunctionCallee store[5];
  // pmlab's own: a load whose store to the same address follows
  // (`mergedAccesses`), counted as a store with the load's value.
  FunctionCallee update[5];
  // __sanitizer_cov_trace_cmp4 / _cmp8 (clang's trace-cmp ABI): the
  // overlap estimator's control dependences.
  FunctionCallee cmp4, cmp8;
};

Hooks declareHooks(Module &M) {
  LLVMContext &C = M.getContext();
  Type *ptr = Type::getInt8PtrTy(C);
  Type *voidTy = Type::getVoidTy(C);
  Hooks h;
  const char *sizes[5] = {"1", "2", "4", "8", "16"};
  for (int i = 0; i < 5; i++) {
    h.load[i] = M.getOrInsertFunction(
        (Twine("__sanitizer_cov_load") + sizes[i]).str(), voidTy, ptr);
    h.store[i] = M.getOrInsertFunction(
        (Twine("__sanitizer_cov_store") + sizes[i]).str(), voidTy, ptr);
    h.update[i] = M.getOrInsertFunction(
        (Twine("__pmlab_cov_update") + sizes[i]).str(), voidTy, ptr);
  }
  Type *i32 = Type::getInt32Ty(C), *i64 = Type::getInt64Ty(C);
  h.cmp4 = M.getOrInsertFunction("__sanitizer_cov_trace_cmp4", voidTy, i32, i32);
  h.cmp8 = M.getOrInsertFunction("__sanitizer_cov_trace_cmp8", voidTy, i64, i64);
  return h;
}

// How far back through the arithmetic an operand is traced to a load.
constexpr unsigned kMaxTrace = 12;

// Whether `V` can change from one iteration of `L` to the next with a value
// the program loaded inside `L` (`L` null: with any loaded value), traced
// back through arithmetic, casts, address computations, selects and phis.
// Values defined outside `L` are invariant in it and carry no miss of the
// iteration; a value the trace cannot follow (a call's result, an atomic)
// or follows too far counts as loaded, and so does an argument outside
// loops.
bool loadedIn(Value *V, const Loop *L, SmallPtrSetImpl<Value *> &seen,
              unsigned depth) {
  // Outside loops, an argument may be a value the caller just loaded (a
  // comparison function given two keys, in a function that also loads or
  // stores: one that does neither is not rewritten at all); in a loop it
  // is invariant.
  if (isa<Argument>(V))
    return !L;
  auto *I = dyn_cast<Instruction>(V);
  if (!I || (L && !L->contains(I)) || !seen.insert(I).second)
    return false;
  if (depth >= kMaxTrace)
    return true;
  if (isa<LoadInst>(I))
    return true;
  if (isa<AllocaInst>(I))
    return false;
  auto any = [&](iterator_range<Use *> ops) {
    for (Use &U : ops)
      if (loadedIn(U.get(), L, seen, depth + 1))
        return true;
    return false;
  };
  if (auto *S = dyn_cast<SelectInst>(I))
    return loadedIn(S->getTrueValue(), L, seen, depth + 1) ||
           loadedIn(S->getFalseValue(), L, seen, depth + 1);
  if (auto *CB = dyn_cast<CallBase>(I)) {
    if (auto *II = dyn_cast<IntrinsicInst>(CB))
      if (!II->mayReadOrWriteMemory())
        return any(II->args());
    return true;
  }
  if (isa<CastInst>(I) || isa<BinaryOperator>(I) || isa<UnaryOperator>(I) ||
      isa<GetElementPtrInst>(I) || isa<PHINode>(I) || isa<FreezeInst>(I) ||
      isa<CmpInst>(I) || isa<ExtractValueInst>(I) ||
      isa<ExtractElementInst>(I) || isa<InsertElementInst>(I) ||
      isa<InsertValueInst>(I) || isa<ShuffleVectorInst>(I))
    return any(I->operands());
  return !isa<LandingPadInst>(I);
}

// Whether the compare `c` gets a callback: a scalar 4- or 8-byte integer
// compare (as clang's trace-cmp, without its constant forms) with an
// operand that varies with a value loaded in the compare's innermost loop,
// or, outside loops, with any loaded value or argument. Only such a compare
// can test a value a miss of the current iteration loaded, which is all
// the overlap estimator's control-dependence rule looks for; a loop's
// counter compared with a bound loaded before the loop (memlat's loops)
// tests none.
bool wantsCmpHook(ICmpInst *c, const LoopInfo &LI) {
  if (c->getMetadata("nosanitize"))
    return false;
  Type *ty = c->getOperand(0)->getType();
  if (!ty->isIntegerTy(32) && !ty->isIntegerTy(64))
    return false;
  const Loop *L = LI.getLoopFor(c->getParent());
  SmallPtrSet<Value *, 32> seen;
  return loadedIn(c->getOperand(0), L, seen, 0) ||
         loadedIn(c->getOperand(1), L, seen, 0);
}

// A compare callback before each compare among `insts` (chosen by
// `wantsCmpHook` on the function before it was cloned).
void insertCmpHooks(const Hooks &h, ArrayRef<Instruction *> insts) {
  for (Instruction *I : insts) {
    auto *c = cast<ICmpInst>(I);
    Type *ty = c->getOperand(0)->getType();
    IRBuilder<> B(c);
    CallInst *call = B.CreateCall(ty->isIntegerTy(32) ? h.cmp4 : h.cmp8,
                                  {c->getOperand(0), c->getOperand(1)});
    call->setDoesNotThrow();
    if (DebugLoc dl = c->getDebugLoc())
      call->setDebugLoc(dl);
  }
}

// Stack slots at most this large whose address never escapes the function
// are not hooked (`privateSlots`).
constexpr uint64_t kMaxPrivateSlot = 4096;

// The function's static stack slots of at most kMaxPrivateSlot bytes whose
// address is never captured (stored, passed to a call that may keep it,
// returned): variables the optimizer left in memory, such as an array
// indexed by a variable (memlat's chain pointers). Only this function and
// the calls it makes reach them (a callee's own accesses stay hooked),
// they stay in the first-level cache while it runs, and their hooks would
// all be filter hits: counting them costs calls on the program's critical
// path (two of memlat's three hooked accesses per step) and tells the
// cache model nothing.
SmallPtrSet<AllocaInst *, 16> privateSlots(Function &F, const DataLayout &DL) {
  SmallPtrSet<AllocaInst *, 16> slots;
  if (hookStack())
    return slots;
  for (Instruction &I : F.getEntryBlock()) {
    auto *A = dyn_cast<AllocaInst>(&I);
    if (!A || !A->isStaticAlloca())
      continue;
    Optional<TypeSize> size = A->getAllocationSizeInBits(DL);
    if (!size || size->isScalable() || size->getFixedSize() / 8 > kMaxPrivateSlot)
      continue;
    if (PointerMayBeCaptured(A, /*ReturnCaptures=*/true,
                             /*StoreCaptures=*/true))
      continue;
    slots.insert(A);
  }
  return slots;
}

// Whether the access `I` reads or writes one of `slots`.
bool onSlot(Instruction *I, const SmallPtrSetImpl<AllocaInst *> &slots) {
  Value *ptr = nullptr;
  if (auto *L = dyn_cast<LoadInst>(I))
    ptr = L->getPointerOperand();
  else if (auto *S = dyn_cast<StoreInst>(I))
    ptr = S->getPointerOperand();
  if (!ptr)
    return false;
  auto *A = dyn_cast<AllocaInst>(getUnderlyingObject(ptr));
  return A && slots.count(A);
}

// Whether `I` is an access the hooks see, and which callback (a load in
// `updates`: the update callback).
bool hookOf(const Hooks &h, const DataLayout &DL, Instruction &I,
            FunctionCallee &fn, Value *&ptr,
            const SmallPtrSetImpl<Instruction *> *updates = nullptr) {
  Type *ty;
  if (auto *L = dyn_cast<LoadInst>(&I)) {
    ptr = L->getPointerOperand();
    ty = L->getType();
  } else if (auto *S = dyn_cast<StoreInst>(&I)) {
    ptr = S->getPointerOperand();
    ty = S->getValueOperand()->getType();
  } else {
    return false;
  }
  if (I.getMetadata("nosanitize"))
    return false;
  if (ptr->getType()->getPointerAddressSpace() != 0)
    return false;
  if (!ty->isSized())
    return false;
  TypeSize ts = DL.getTypeStoreSize(ty);
  if (ts.isScalable())
    return false;
  int idx = sizeIndex(ts.getFixedSize());
  if (idx < 0)
    return false;
  if (isa<LoadInst>(I))
    fn = updates && updates->count(&I) ? h.update[idx] : h.load[idx];
  else
    fn = h.store[idx];
  return true;
}

// The accesses `mergedAccesses` pairs: each load of `updates` is hooked
// by the update callback, and the store of `stores` that follows it gets
// no hook.
struct Merged {
  SmallPtrSet<Instruction *, 16> updates;
  SmallPtrSet<Instruction *, 16> stores;
};

// Whether `I`, between a load and a store, ends the pairing: a call
// (it may flush the line or run code that does; intrinsics that touch no
// memory, debug and lifetime markers excepted), a fence or an atomic
// read-modify-write.
bool endsPairing(Instruction &I) {
  if (isa<FenceInst>(I) || isa<AtomicRMWInst>(I) || isa<AtomicCmpXchgInst>(I))
    return true;
  auto *CB = dyn_cast<CallBase>(&I);
  if (!CB)
    return false;
  if (isa<DbgInfoIntrinsic>(CB))
    return false;
  if (auto *II = dyn_cast<IntrinsicInst>(CB)) {
    if (II->isLifetimeStartOrEnd() || !II->mayReadOrWriteMemory())
      return false;
  }
  return true;
}

// The loads of `F` followed in their block by a store of the same size to
// the same pointer, with no call, fence, atomic (`endsPairing`) or other
// hooked store between, neither access atomic nor on a private slot
// (those get no hook at all). Hooked loads may lie between; a store may
// not, so that every hooked store is still seen in program order.
// A pair's two hooks would see the same line one after the other: the
// load's hook puts it in the thread's filter (logging it when it was not
// there), and the store's finds it there, or logs a store to the line the
// model just saw. One update hook before the load does both: it logs the
// load's value (the overlap estimator's dependence) with the store bit, so
// that the model dirties the line once, as the two hooks would have. The
// hooked accesses between the two (idxchase's chase load between the
// load and the store of the chain's state) could only push the line out
// of the filter (a direct-mapped conflict) or out of the model (its set's
// random victim), after which the store's own hook would log the line
// again: a dirty line the model already counted, or, rarer, one it must
// read again. Chosen on the optimized code before it is rewritten.
Merged mergedAccesses(Function &F, const DataLayout &DL,
                      const SmallPtrSetImpl<AllocaInst *> &slots) {
  Merged m;
  if (!mergeOn())
    return m;
  for (BasicBlock &BB : F) {
    // The latest load of each address since the last call, fence or
    // hooked store, in program order.
    SmallVector<std::pair<Value *, LoadInst *>, 8> open;
    for (Instruction &I : BB) {
      if (endsPairing(I)) {
        open.clear();
        continue;
      }
      auto *L = dyn_cast<LoadInst>(&I);
      auto *S = dyn_cast<StoreInst>(&I);
      // Accesses that get no hook at all.
      if ((!L && !S) || I.getMetadata("nosanitize") || onSlot(&I, slots))
        continue;
      if (L && L->isAtomic())
        continue;
      Value *ptr = (L ? L->getPointerOperand() : S->getPointerOperand())
                       ->stripPointerCasts();
      auto at = std::find_if(open.begin(), open.end(),
                             [&](auto &o) { return o.first == ptr; });
      if (L) {
        if (at != open.end())
          open.erase(at);
        open.push_back({ptr, L});
        continue;
      }
      // A hooked store. Paired, its store is seen at its load; so that
      // the stores keep their order (a trace's W records: `pmlab trace`,
      // `pmlab check`), no later store may be paired with a load before
      // this one: the loads opened before it are dropped (before the
      // paired load, or all of them when it is not paired).
      if (at == open.end() || S->isAtomic()) {
        open.clear();
        continue;
      }
      LoadInst *load = at->second;
      open.erase(open.begin(), at + 1);
      TypeSize ls = DL.getTypeStoreSize(load->getType());
      TypeSize ss = DL.getTypeStoreSize(S->getValueOperand()->getType());
      if (ls != ss || ls.isScalable() || sizeIndex(ls.getFixedSize()) < 0)
        continue;
      m.updates.insert(load);
      m.stores.insert(S);
    }
  }
  return m;
}

// Insert a hook before every hooked access among `insts` (the loads of
// `updates` by the update callback).
void insertHooks(const Hooks &h, const DataLayout &DL,
                 ArrayRef<Instruction *> insts,
                 const SmallPtrSetImpl<Instruction *> &updates) {
  for (Instruction *I : insts) {
    FunctionCallee fn;
    Value *ptr;
    if (!hookOf(h, DL, *I, fn, ptr, &updates))
      continue;
    IRBuilder<> B(I);
    Value *p = B.CreatePointerCast(ptr, B.getInt8PtrTy());
    CallInst *call = B.CreateCall(fn, {p});
    call->setDoesNotThrow();
    if (DebugLoc dl = I->getDebugLoc())
      call->setDebugLoc(dl);
  }
}

// Why `F` cannot be cloned, or nullptr when it can.
const char *cannotClone(Function &F) {
  unsigned n = 0;
  for (BasicBlock &BB : F) {
    if (BB.hasAddressTaken())
      return "block address taken";
    // Landing pads (Itanium C++ exceptions) are cloned with their
    // invokes; funclet pads (Windows) are not handled.
    if (BB.isEHPad() && !BB.isLandingPad())
      return "funclet exception pad";
    for (Instruction &I : BB) {
      n++;
      if (isa<CallBrInst>(I))
        return "callbr";
      if (isa<IndirectBrInst>(I))
        return "indirectbr";
      if (I.isEHPad() && !isa<LandingPadInst>(I))
        return "funclet exception pad";
      if (I.getType()->isTokenTy())
        return "token value";
      if (auto *CB = dyn_cast<CallBase>(&I)) {
        if (auto *CI = dyn_cast<CallInst>(CB))
          if (CI->isMustTailCall())
            return "musttail call";
        if (CB->hasFnAttr(Attribute::ReturnsTwice))
          return "returns_twice call (setjmp)";
        if (Function *callee = CB->getCalledFunction())
          if (callee->hasFnAttribute(Attribute::ReturnsTwice))
            return "returns_twice call (setjmp)";
      }
    }
  }
  if (n > kMaxInstructions)
    return "too large";
  return nullptr;
}

// Functions the hooks never see (as sanitizer coverage skips them).
bool skipEntirely(Function &F) {
  if (F.isDeclaration() || F.hasAvailableExternallyLinkage())
    return true;
  if (F.hasFnAttribute(Attribute::NoSanitizeCoverage) ||
      F.hasFnAttribute(Attribute::Naked))
    return true;
  StringRef name = F.getName();
  if (name.startswith("__sanitizer_") || name.startswith("__pmlab") ||
      name.startswith("__tsan_"))
    return true;
  if (isa<UnreachableInst>(F.getEntryBlock().getTerminator()))
    return true;
  return false;
}

// A leaf: no calls but to intrinsics (inline assembly included), hence
// with no callee that could run a loop of its own.
bool isLeaf(Function &F) {
  for (BasicBlock &BB : F)
    for (Instruction &I : BB)
      if (auto *CB = dyn_cast<CallBase>(&I)) {
        if (CB->isInlineAsm())
          continue;
        if (Function *callee = CB->getCalledFunction())
          if (callee->isIntrinsic())
            continue;
        return false;
      }
  return true;
}

bool hasAccesses(Function &F) {
  for (BasicBlock &BB : F)
    for (Instruction &I : BB)
      if (isa<LoadInst>(I) || isa<StoreInst>(I))
        return true;
  return false;
}

struct Sampler {
  Module &M;
  const DataLayout &DL;
  Hooks hooks;
  GlobalVariable *state;
  FunctionCallee switchFn;
  bool debug;

  explicit Sampler(Module &M)
      : M(M), DL(M.getDataLayout()), hooks(declareHooks(M)),
        state(nullptr), debug(debugOn()) {
    LLVMContext &C = M.getContext();
    Type *i64 = Type::getInt64Ty(C);
    ArrayType *ty = ArrayType::get(i64, 3);
    state = M.getGlobalVariable(kStateName, true);
    if (!state) {
      Constant *one = ConstantInt::get(i64, 1);
      Constant *zero = ConstantInt::get(i64, 0);
      state = new GlobalVariable(M, ty, false,
                                 GlobalValue::LinkOnceODRLinkage,
                                 ConstantArray::get(ty, {one, one, zero}),
                                 kStateName,
                                 nullptr, GlobalValue::InitialExecTLSModel);
      state->setVisibility(GlobalValue::HiddenVisibility);
      state->setAlignment(Align(32));
      // An executable (no PIC, or PIE) may use the cheapest model; a
      // shared object initial-exec (glibc's surplus static TLS holds 24
      // bytes even for a dlopen'ed library).
      if (M.getPICLevel() == PICLevel::NotPIC ||
          M.getPIELevel() != PIELevel::Default)
        state->setThreadLocalMode(GlobalValue::LocalExecTLSModel);
    }
    switchFn = M.getOrInsertFunction(kSwitchName, Type::getInt32Ty(C),
                                     PointerType::getUnqual(i64));
    if (auto *f = dyn_cast<Function>(switchFn.getCallee()))
      f->setDoesNotThrow();
  }

  Value *slot(IRBuilder<> &B, unsigned i) {
    return B.CreateConstInBoundsGEP2_64(state->getValueType(), state, 0, i);
  }

  // At the end of `BB`: `if (--state[which] <= 0) goto expired else goto
  // cont`. Returns the decremented count; `expired` and `cont` must exist.
  Value *countdown(BasicBlock *BB, unsigned which, BasicBlock *expired,
                   BasicBlock *cont) {
    IRBuilder<> B(BB);
    Value *p = slot(B, which);
    LoadInst *v = B.CreateLoad(B.getInt64Ty(), p);
    Value *dec = B.CreateSub(v, B.getInt64(1));
    B.CreateStore(dec, p);
    Value *out = B.CreateICmpSLE(dec, B.getInt64(0));
    // Expiry is rare: tell the code generator.
    MDBuilder md(B.getContext());
    B.CreateCondBr(out, expired, cont, md.createBranchWeights(1, 100000));
    return dec;
  }

  // `cd = state[0]`: the clean copy's register copy of the gap's count,
  // taken again wherever something else may have moved it.
  void reloadGap(IRBuilder<> &B, AllocaInst *cd) {
    B.CreateStore(B.CreateLoad(B.getInt64Ty(), slot(B, 0)), cd);
  }

  // `state[0] = cd`: memory brought up to the register count, before the
  // clean copy leaves the function's own code (a call, a return).
  void syncGap(IRBuilder<> &B, AllocaInst *cd) {
    B.CreateStore(B.CreateLoad(B.getInt64Ty(), cd), slot(B, 0))
        ->setVolatile(true);
  }

  // The clean copy's back-edge check, at the end of `BB`. The gap's count
  // lives in `cd` (a slot of the function's, promoted to a register) and
  // reaches memory only every kSyncEvery-th check (when the count is a
  // multiple of it), before every call and return, and before the switch:
  // a tight loop pays a decrement and a test, not a load, a store and a
  // store-to-load forwarding chain through memory (radix sort's counting
  // pass ran 1.16x native in its gaps with the memory countdown).
  //   * The count still runs out at exactly 0 (a positive count meets 0,
  //     a multiple of every power of two), where memory is written first:
  //     the switch reads the exact count.
  //   * Between syncs memory is ahead of the true count by fewer than
  //     kSyncEvery checks: what the epoch's signal handler reads of the
  //     gap's progress lags by that much.
  //   * The handler cuts a gap short by writing 1 (`Switch::cut_gap`);
  //     memory, which the program only lowers to its own count, is then
  //     below the count, which the next sync sees: it asks at once (within
  //     kSyncEvery checks of the cut, as the memory countdown did at the
  //     next check).
  static constexpr int64_t kSyncEvery = 8;
  void cleanEdge(BasicBlock *BB, AllocaInst *cd, BasicBlock *expired,
                 BasicBlock *cont) {
    LLVMContext &C = BB->getContext();
    Function *F = BB->getParent();
    MDBuilder md(C);
    BasicBlock *sync = BasicBlock::Create(C, "pmlab.edge.sync", F);
    BasicBlock *settle = BasicBlock::Create(C, "pmlab.edge.settle", F);
    BasicBlock *cut = BasicBlock::Create(C, "pmlab.edge.cut", F);
    IRBuilder<> B(BB);
    Value *dec = B.CreateSub(B.CreateLoad(B.getInt64Ty(), cd), B.getInt64(1));
    B.CreateStore(dec, cd);
    Value *low = B.CreateAnd(dec, B.getInt64(kSyncEvery - 1));
    B.CreateCondBr(B.CreateICmpNE(low, B.getInt64(0)), cont, sync,
                   md.createBranchWeights(kSyncEvery - 1, 1));
    B.SetInsertPoint(sync);
    LoadInst *mem = B.CreateLoad(B.getInt64Ty(), slot(B, 0));
    mem->setVolatile(true);
    B.CreateCondBr(B.CreateICmpSLT(mem, dec), cut, settle,
                   md.createBranchWeights(1, 100000));
    B.SetInsertPoint(settle);
    B.CreateStore(dec, slot(B, 0))->setVolatile(true);
    B.CreateCondBr(B.CreateICmpSLE(dec, B.getInt64(0)), expired, cont,
                   md.createBranchWeights(1, 100000));
    B.SetInsertPoint(cut);
    B.CreateStore(B.getInt64(0), slot(B, 0))->setVolatile(true);
    B.CreateBr(expired);
  }

  // A block that calls the switch and goes to `instr` on non-zero, `clean`
  // on zero; the switch sets the next gap, so `cd` is taken again.
  BasicBlock *asker(Function &F, const Twine &name, BasicBlock *instr,
                    BasicBlock *clean, AllocaInst *cd) {
    BasicBlock *BB = BasicBlock::Create(F.getContext(), name, &F);
    IRBuilder<> B(BB);
    CallInst *r = B.CreateCall(switchFn, {slot(B, 0)});
    r->setDoesNotThrow();
    reloadGap(B, cd);
    B.CreateCondBr(B.CreateICmpNE(r, B.getInt32(0)), instr, clean);
    return BB;
  }

  void fullyInstrument(Function &F) {
    auto slots = privateSlots(F, DL);
    Merged merged = mergedAccesses(F, DL, slots);
    SmallVector<Instruction *, 64> insts;
    unsigned skipped = 0;
    for (BasicBlock &BB : F)
      for (Instruction &I : BB) {
        if (onSlot(&I, slots))
          skipped++;
        else if (!merged.stores.count(&I))
          insts.push_back(&I);
      }
    insertHooks(hooks, DL, insts, merged.updates);
    if (debug)
      errs() << "pmlab sample: " << F.getName() << ": " << skipped
             << " private stack access(es) not hooked, "
             << merged.updates.size() << " load/store pair(s) merged\n";
  }

  void sample(Function &F) {
    LLVMContext &C = F.getContext();
    // Before the hooks are added (they are calls).
    bool leaf = isLeaf(F);
    // The compares that get a callback and the stack slots that get no
    // hooks, chosen on the optimized code before it is rewritten (the
    // demotion below turns every value that crosses blocks into a load).
    SmallVector<ICmpInst *, 32> hookedCmps;
    unsigned cmpsTotal = 0;
    {
      DominatorTree DT0(F);
      LoopInfo LI0(DT0);
      for (BasicBlock &BB : F)
        for (Instruction &I : BB)
          if (auto *c = dyn_cast<ICmpInst>(&I)) {
            cmpsTotal++;
            bool want = wantsCmpHook(c, LI0);
            if (want)
              hookedCmps.push_back(c);
            if (debugCompares()) {
              errs() << "pmlab sample: " << F.getName() << ": compare "
                     << (want ? "hooked" : "skipped");
              if (const DebugLoc &dl = c->getDebugLoc())
                errs() << " at line " << dl.getLine();
              errs() << " (loop depth " << LI0.getLoopDepth(c->getParent())
                     << "):" << *c << "\n";
            }
          }
    }
    auto slots = privateSlots(F, DL);
    Merged merged = mergedAccesses(F, DL, slots);
    // 1. A prologue holding the entry block's static allocas (never
    //    cloned: both copies use the same slots).
    BasicBlock *oldEntry = &F.getEntryBlock();
    SmallVector<AllocaInst *, 16> statics;
    for (Instruction &I : *oldEntry)
      if (auto *A = dyn_cast<AllocaInst>(&I))
        if (A->isStaticAlloca())
          statics.push_back(A);
    BasicBlock *prologue =
        BasicBlock::Create(C, "pmlab.prologue", &F, oldEntry);
    BranchInst *toBody = BranchInst::Create(oldEntry, prologue);
    for (AllocaInst *A : statics)
      A->moveBefore(toBody);

    // 2. Demote values that live across blocks, then phis, to stack slots
    //    in the prologue. An invoke's result is stored in its normal
    //    destination, and a phi's reload goes before the terminator of the
    //    incoming block: give every invoke a normal destination of its own
    //    first, so that the reload comes after the store.
    SmallVector<InvokeInst *, 8> invokes;
    for (BasicBlock &BB : F)
      if (auto *II = dyn_cast<InvokeInst>(BB.getTerminator()))
        invokes.push_back(II);
    SmallPtrSet<BasicBlock *, 8> conts;
    for (InvokeInst *II : invokes) {
      BasicBlock *from = II->getParent(), *to = II->getNormalDest();
      BasicBlock *mid = BasicBlock::Create(C, "pmlab.invoke.cont", &F, to);
      conts.insert(mid);
      BranchInst::Create(to, mid);
      II->setNormalDest(mid);
      for (PHINode &P : to->phis())
        for (unsigned i = 0; i < P.getNumIncomingValues(); i++)
          if (P.getIncomingBlock(i) == from)
            P.setIncomingBlock(i, mid);
    }
    SmallVector<Instruction *, 64> worklist;
    for (BasicBlock &BB : F) {
      if (&BB == prologue)
        continue;
      for (Instruction &I : BB) {
        if (isa<AllocaInst>(I) && I.getParent() == prologue)
          continue;
        for (User *U : I.users()) {
          auto *UI = cast<Instruction>(U);
          if (UI->getParent() != &BB || isa<PHINode>(UI)) {
            worklist.push_back(&I);
            break;
          }
        }
      }
    }
    SmallPtrSet<AllocaInst *, 32> ours;
    for (Instruction *I : worklist)
      if (AllocaInst *A = DemoteRegToStack(*I, false, toBody))
        ours.insert(A);
    SmallVector<PHINode *, 32> phis;
    for (BasicBlock &BB : F)
      for (PHINode &P : BB.phis())
        phis.push_back(&P);
    for (PHINode *P : phis)
      if (AllocaInst *A = DemotePHIToStack(P, toBody))
        ours.insert(A);

    // 3. The loops' back-edges, on the clean CFG.
    DominatorTree DT(F);
    LoopInfo LI(DT);
    SmallVector<std::pair<BasicBlock *, BasicBlock *>, 16> backEdges;
    for (Loop *L : LI.getLoopsInPreorder()) {
      SmallVector<BasicBlock *, 4> latches;
      L->getLoopLatches(latches);
      // A header entered by an unwind edge cannot take a check block.
      if (L->getHeader()->isEHPad())
        continue;
      for (BasicBlock *latch : latches)
        backEdges.push_back({latch, L->getHeader()});
    }

    // 4. Clone the body.
    SmallVector<BasicBlock *, 64> body;
    for (BasicBlock &BB : F)
      if (&BB != prologue)
        body.push_back(&BB);
    ValueToValueMapTy VMap;
    SmallVector<BasicBlock *, 64> clones;
    for (BasicBlock *BB : body) {
      BasicBlock *NB = CloneBasicBlock(BB, VMap, ".pmlab.i", &F);
      VMap[BB] = NB;
      clones.push_back(NB);
    }
    remapInstructionsInBlocks(clones, VMap);
    auto clone = [&](BasicBlock *BB) { return cast<BasicBlock>(VMap[BB]); };

    // 5. Hooks in the instrumented copy, except on our own slots and the
    //    stores merged into their loads' hooks.
    SmallVector<Instruction *, 256> accesses, compares;
    SmallPtrSet<Instruction *, 16> updates, dropped;
    for (Instruction *I : merged.updates)
      updates.insert(cast<Instruction>(VMap[I]));
    for (Instruction *I : merged.stores)
      dropped.insert(cast<Instruction>(VMap[I]));
    unsigned onSlots = 0;
    for (BasicBlock *BB : clones)
      for (Instruction &I : *BB) {
        Value *ptr = nullptr;
        if (auto *L = dyn_cast<LoadInst>(&I))
          ptr = L->getPointerOperand();
        else if (auto *S = dyn_cast<StoreInst>(&I))
          ptr = S->getPointerOperand();
        else
          continue;
        if (auto *A = dyn_cast<AllocaInst>(ptr->stripPointerCasts()))
          if (ours.count(A))
            continue;
        if (onSlot(&I, slots)) {
          onSlots++;
          continue;
        }
        if (dropped.count(&I))
          continue;
        accesses.push_back(&I);
      }
    for (ICmpInst *c : hookedCmps)
      compares.push_back(cast<Instruction>(VMap[c]));
    insertHooks(hooks, DL, accesses, updates);
    insertCmpHooks(hooks, compares);

    // 6. Entry: prologue -> dispatch on the window flag -> clean or
    //    instrumented body; functions with loops or calls also count a
    //    check (in the window's countdown or the gap's).
    //    Functions with loops keep the clean copy's count of the gap in a
    //    register (see cleanEdge): it starts at 0 (a path this pass missed
    //    then asks within kSyncEvery checks), is set by the entry's check,
    //    written to memory before every call, invoke, resume and return of
    //    the clean copy and taken again after every call and switch and at
    //    every landing pad.
    BasicBlock *cleanEntry = oldEntry, *instrEntry = clone(oldEntry);
    AllocaInst *cd =
        new AllocaInst(Type::getInt64Ty(C), 0, "pmlab.gap", toBody);
    ours.insert(cd);
    toBody->eraseFromParent();
    if (!backEdges.empty())
      for (BasicBlock *BB : body) {
        if (BB->isLandingPad() || conts.count(BB)) {
          IRBuilder<> B(&*BB->getFirstInsertionPt());
          reloadGap(B, cd);
        }
        for (auto it = BB->begin(); it != BB->end(); ++it) {
          Instruction *I = &*it;
          if (isa<ReturnInst>(I) || isa<ResumeInst>(I) ||
              isa<InvokeInst>(I)) {
            IRBuilder<> B(I);
            syncGap(B, cd);
            continue;
          }
          auto *call = dyn_cast<CallInst>(I);
          if (!call || isa<IntrinsicInst>(call))
            continue;
          IRBuilder<> B(I);
          syncGap(B, cd);
          B.SetInsertPoint(&*std::next(it));
          reloadGap(B, cd);
        }
      }
    bool counts = !backEdges.empty() || !leaf;
    BasicBlock *inWindow = instrEntry, *inGap = cleanEntry;
    if (counts) {
      inWindow = BasicBlock::Create(C, "pmlab.entry.window", &F);
      inGap = BasicBlock::Create(C, "pmlab.entry.gap", &F);
      BasicBlock *ask =
          asker(F, "pmlab.entry.ask", instrEntry, cleanEntry, cd);
      countdown(inWindow, 1, ask, instrEntry);
      Value *dec = countdown(inGap, 0, ask, cleanEntry);
      new StoreInst(dec, cd, inGap->getTerminator());
    }
    {
      IRBuilder<> B(prologue);
      B.CreateStore(B.getInt64(0), cd);
      LoadInst *flag = B.CreateLoad(B.getInt64Ty(), slot(B, 2));
      B.CreateCondBr(B.CreateICmpNE(flag, B.getInt64(0)), inWindow, inGap);
    }

    // 7. Back-edges of both copies.
    unsigned n = 0;
    for (auto &[latch, header] : backEdges) {
      BasicBlock *H = header, *Hi = clone(header);
      for (int copy = 0; copy < 2; copy++) {
        BasicBlock *from = copy ? clone(latch) : latch;
        BasicBlock *to = copy ? Hi : H;
        Instruction *T = from->getTerminator();
        BasicBlock *check =
            BasicBlock::Create(C, copy ? "pmlab.iedge" : "pmlab.edge", &F);
        BasicBlock *a = asker(F, copy ? "pmlab.iedge.ask" : "pmlab.edge.ask",
                              Hi, H, cd);
        if (copy)
          countdown(check, 1, a, to);
        else
          cleanEdge(check, cd, a, to);
        for (unsigned s = 0; s < T->getNumSuccessors(); s++)
          if (T->getSuccessor(s) == to)
            T->setSuccessor(s, check);
      }
      n++;
    }

    // 8. Back to registers.
    DominatorTree DT2(F);
    std::vector<AllocaInst *> promote;
    for (AllocaInst *A : ours)
      if (isAllocaPromotable(A))
        promote.push_back(A);
    if (!promote.empty())
      PromoteMemToReg(promote, DT2);
    if (debug)
      errs() << "pmlab sample: " << F.getName() << ": two copies, "
             << (counts ? "entry check, " : "leaf: window flag at entry, ")
             << n << " back-edge(s), " << accesses.size()
             << " access(es) in the instrumented copy, " << onSlots
             << " private stack access(es) not hooked, "
             << updates.size() << " load/store pair(s) merged, "
             << compares.size()
             << " of " << cmpsTotal << " compare(s) hooked\n";
  }

  bool run() {
    bool changed = false;
    for (Function &F : M) {
      if (skipEntirely(F) || !hasAccesses(F))
        continue;
      if (const char *why = cannotClone(F)) {
        if (debug)
          errs() << "pmlab sample: " << F.getName()
                 << ": fully instrumented (" << why << ")\n";
        fullyInstrument(F);
      } else {
        sample(F);
      }
      changed = true;
    }
    return changed;
  }
};

struct SamplePass : PassInfoMixin<SamplePass> {
  PreservedAnalyses run(Module &M, ModuleAnalysisManager &) {
    if (M.getGlobalVariable(kStateName, true) &&
        M.getGlobalVariable(kStateName, true)->hasMetadata("pmlab.done"))
      return PreservedAnalyses::all();
    Sampler s(M);
    bool changed = s.run();
    // Mark the module, so that a second run (e.g. at LTO link time) does
    // not clone the clones.
    s.state->setMetadata("pmlab.done", MDNode::get(M.getContext(), {}));
    return changed ? PreservedAnalyses::none() : PreservedAnalyses::all();
  }
  static bool isRequired() { return true; }
};

} // namespace

extern "C" LLVM_ATTRIBUTE_WEAK PassPluginLibraryInfo llvmGetPassPluginInfo() {
  return {LLVM_PLUGIN_API_VERSION, "pmlab-sample", "1",
          [](PassBuilder &PB) {
            PB.registerOptimizerLastEPCallback(
                [](ModulePassManager &MPM, OptimizationLevel) {
                  MPM.addPass(SamplePass());
                });
          }};
}
