// tdsl's host emulation of a block's threads, for the launches whose threads work together (a
// warp or a block per grid iteration, a transposed tile, a tensor-core template): every thread of
// a block is a fiber, and the instructions that need other threads (block barriers, warp
// shuffles and barriers, and mma_host.h's tensor-core instructions) are performed in software
// on the gathered lanes.
//
// A launch runs its blocks one after another (tdsl_emu_launch). Each thread runs the kernel
// until it reaches an instruction that needs other threads: a block barrier, a warp-wide
// instruction or a warpgroup-wide one. When every thread of a group waits at the same
// instruction, the scheduler performs it on the gathered lanes and resumes them. A thread group
// that can never complete (threads of a warp at different instructions, a barrier some threads
// never reach or that threads which returned leave short) stops the emulator with a message: on
// a GPU it would hang or be undefined. Blocks run in a shuffled order, a warp runs ahead of the
// others as far as it can, and its lanes resume in random order (tdsl_emu_run says how; host.h's
// tdsl_emu_order and tdsl_emu_pick draw), so a result that leans on a missing barrier shows as a
// difference from the interpreter.
#include <vector>

// Fiber contexts. On x86-64 a switch saves the callee-saved registers, the floating-point
// control words and the stack pointer, and loads another fiber's (a few nanoseconds); elsewhere
// it is ucontext's swapcontext, which also makes two system calls for the signal mask.
#if defined(__x86_64__)
struct tdsl_emu_ctx { void *sp; };
// tdsl_emu_swap(save, load): saves this context's stack pointer in *save, resumes `load`.
extern "C" void tdsl_emu_swap(void **save, void *load);
__asm__(
    ".text\n.p2align 4\n.type tdsl_emu_swap,@function\ntdsl_emu_swap:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n.size tdsl_emu_swap, .-tdsl_emu_swap\n");
// A context that starts `entry` (which never returns) on the stack [stack, stack + size): the
// frame tdsl_emu_swap pops, returning into `entry` as if it had been called.
static void tdsl_emu_ctx_make(tdsl_emu_ctx &c, char *stack, size_t size, void (*entry)()) {
  uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
  void **sp = (void **)(top - 72);
  memset(sp, 0, 72);
  unsigned control[2];
  __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(control[0]), "=m"(control[1]));
  memcpy(sp, control, 8);                   // mxcsr, then the x87 control word
  sp[7] = (void *)entry;                    // after the six registers: the return address
  c.sp = sp;                                // sp[8]: a zero return address for `entry`
}
static void tdsl_emu_ctx_swap(tdsl_emu_ctx &from, tdsl_emu_ctx &to) { tdsl_emu_swap(&from.sp, to.sp); }
#else
#include <ucontext.h>
struct tdsl_emu_ctx { ucontext_t uc; };
static void tdsl_emu_ctx_make(tdsl_emu_ctx &c, char *stack, size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
static void tdsl_emu_ctx_swap(tdsl_emu_ctx &from, tdsl_emu_ctx &to) { swapcontext(&from.uc, &to.uc); }
#endif

#define TDSL_EMU_STACK (256 * 1024)

static void tdsl_emu_fail(const char *what) {
  fprintf(stderr, "tdsl emulation: block %lld thread %lld: %s\n", blockIdx.x, threadIdx.x, what);
  exit(7);
}

// What a fiber is doing.
enum { TDSL_EMU_RUN, TDSL_EMU_DONE, TDSL_EMU_BAR, TDSL_EMU_WARP, TDSL_EMU_WG };
// Warp-wide instructions; mma_host.h numbers its own from TDSL_OP_TC.
enum { TDSL_OP_SHFL, TDSL_OP_SYNCWARP, TDSL_OP_TC };

// A thread: its context, what it waits at, and that instruction's operands and results.
struct tdsl_emu_fiber {
  tdsl_emu_ctx ctx;
  int state, op;
  unsigned in[12], out[4];
  unsigned long long da, db;
  int n, type;
  float *d;
};

static std::vector<tdsl_emu_fiber> tdsl_emu_fibers;
static tdsl_emu_ctx tdsl_emu_sched;
static int tdsl_emu_self;
static void (*tdsl_emu_body)(void *);
static void *tdsl_emu_body_data;

// What mma_host.h adds when a unit has tensor-core templates: its instructions, performed on
// the gathered lanes of warp or warpgroup `group`, and its state, reset as a block starts and
// checked as it ends.
struct tdsl_emu_hooks {
  void (*perform)(tdsl_emu_fiber *w, int lanes, int group);
  void (*block_start)(int threads);
  void (*block_end)();
};
static tdsl_emu_hooks tdsl_emu_tc = {nullptr, nullptr, nullptr};

static tdsl_emu_fiber &tdsl_emu_me() { return tdsl_emu_fibers[tdsl_emu_self]; }
// Wait at an instruction of a group (`state`) until the scheduler has performed it.
static void tdsl_emu_wait(int state, int op) {
  tdsl_emu_fiber &f = tdsl_emu_me();
  f.state = state;
  f.op = op;
  tdsl_emu_ctx_swap(f.ctx, tdsl_emu_sched);
}
// A fiber runs the kernel once, then waits for good: the scheduler never resumes a done thread.
static void tdsl_emu_entry() {
  tdsl_emu_body(tdsl_emu_body_data);
  tdsl_emu_wait(TDSL_EMU_DONE, 0);
  tdsl_emu_fail("a finished thread resumed");
}
#define __syncthreads() tdsl_emu_wait(TDSL_EMU_BAR, 0)

// Performs the instruction every lane of the group `w` (32 or 128 fibers) waits at.
static void tdsl_emu_perform(tdsl_emu_fiber *w, int lanes, int group) {
  switch (w[0].op) {
    case TDSL_OP_SHFL:
      // __shfl_xor_sync: lane l reads the value of lane l ^ offset (in[0..1]: 8 bytes, in[2]).
      for (int l = 0; l < lanes; l++) {
        const tdsl_emu_fiber &src = w[l ^ (int)(w[l].in[2] & 31u)];
        w[l].out[0] = src.in[0];
        w[l].out[1] = src.in[1];
      }
      break;
    case TDSL_OP_SYNCWARP: break;
    default:
      if (!tdsl_emu_tc.perform) tdsl_emu_fail("an instruction this unit cannot emulate");
      tdsl_emu_tc.perform(w, lanes, group);
  }
}

// Runs `body(data)` as `blocks` blocks of `threads` threads (blockIdx.x, threadIdx.x set).
//
// Blocks run one after another, in the order tdsl_emu_order gives. Within a block the scheduler
// resumes one ready thread at a time until it waits; when its group (warp, warpgroup, block)
// then waits at the same instruction, the scheduler performs the instruction and the group is
// ready again. Which thread: one of the ready lanes, drawn at random, of the first warp with
// any in a ranking of the block's warps that is drawn afresh at every block barrier. So a warp
// runs ahead of the others as far as it can before they move (a barrier that is missing lets
// it read or overwrite what they have not yet written or read), and a warp's lanes run in no
// particular order (a missing __syncwarp shows the same way).
static void tdsl_emu_run(long long blocks, int threads, void (*body)(void *), void *data) {
  static std::vector<char> stacks;
  stacks.resize((size_t)threads * TDSL_EMU_STACK);
  gridDim.x = blocks;
  blockDim.x = threads;
  tdsl_emu_body = body;
  tdsl_emu_body_data = data;
  const int warps = (threads + 31) / 32;
  std::vector<long long> block_order(blocks), rank(warps);
  std::vector<std::vector<int>> ready(warps);  // a warp's ready lanes
  tdsl_emu_order(block_order.data(), blocks);
  const auto make_ready = [&](int t) {
    tdsl_emu_fibers[t].state = TDSL_EMU_RUN;
    ready[t / 32].push_back(t);
  };
  for (long long bx : block_order) {
    blockIdx.x = bx;
    if (tdsl_emu_tc.block_start) tdsl_emu_tc.block_start(threads);
    tdsl_emu_fibers.assign(threads, tdsl_emu_fiber{});
    for (int t = 0; t < threads; t++) {
      tdsl_emu_fiber &f = tdsl_emu_fibers[t];
      tdsl_emu_ctx_make(f.ctx, stacks.data() + (size_t)t * TDSL_EMU_STACK, TDSL_EMU_STACK, tdsl_emu_entry);
      make_ready(t);
    }
    tdsl_emu_order(rank.data(), warps);
    int done = 0, bar = 0;
    for (;;) {
      std::vector<int> *lanes = nullptr;
      for (long long w : rank) {
        if (!ready[w].empty()) {
          lanes = &ready[w];
          break;
        }
      }
      if (!lanes) break;
      // In thread order (seed 0), the lane that has been ready longest.
      const long i = (long)tdsl_emu_pick((long long)lanes->size());
      const int t = (*lanes)[i];
      lanes->erase(lanes->begin() + i);
      tdsl_emu_self = t;
      threadIdx.x = t;
      tdsl_emu_ctx_swap(tdsl_emu_sched, tdsl_emu_fibers[t].ctx);
      const tdsl_emu_fiber &f = tdsl_emu_fibers[t];
      if (f.state == TDSL_EMU_DONE) {
        done++;
      } else if (f.state == TDSL_EMU_BAR) {
        if (++bar == threads) {
          bar = 0;
          for (int u = 0; u < threads; u++) make_ready(u);
          tdsl_emu_order(rank.data(), warps);
        }
      } else {
        const int size = f.state == TDSL_EMU_WARP ? 32 : 128;
        const int g = t / size * size;
        tdsl_emu_fiber *w = &tdsl_emu_fibers[g];
        bool all = g + size <= threads;
        for (int l = 0; all && l < size; l++) all = w[l].state == f.state && w[l].op == f.op;
        if (all) {
          tdsl_emu_perform(w, size, g / size);
          for (int l = 0; l < size; l++) make_ready(g + l);
        }
      }
    }
    if (done != threads) {
      threadIdx.x = 0;
      tdsl_emu_fail("threads wait at instructions that can never complete (divergent barrier or warp instruction)");
    }
    if (tdsl_emu_tc.block_end) tdsl_emu_tc.block_end();
  }
}

// tdsl_emu_run for a callable (the emulator's main passes a lambda per launch).
template <typename F> static void tdsl_emu_launch(long long blocks, int threads, F body) {
  tdsl_emu_run(blocks, threads, [](void *f) { (*static_cast<F *>(f))(); }, &body);
}

// The warp and block primitives of the generated kernels (cuda.cuh on the device).
template <typename T> static T tdsl_emu_shfl(T x, int off) {
  tdsl_emu_fiber &f = tdsl_emu_me();
  f.in[0] = f.in[1] = 0;
  memcpy(f.in, &x, sizeof x);
  f.in[2] = (unsigned)off;
  tdsl_emu_wait(TDSL_EMU_WARP, TDSL_OP_SHFL);
  T y;
  memcpy(&y, tdsl_emu_me().out, sizeof y);
  return y;
}
TDSL_FN float tdsl_shfl(float x, int off) { return tdsl_emu_shfl(x, off); }
TDSL_FN double tdsl_shfl(double x, int off) { return tdsl_emu_shfl(x, off); }
TDSL_FN void tdsl_syncwarp() { tdsl_emu_wait(TDSL_EMU_WARP, TDSL_OP_SYNCWARP); }
TDSL_FN void tdsl_syncblock() { __syncthreads(); }

