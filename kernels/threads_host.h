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
//
// Compiled with -fsanitize=thread (emulate.rs's race check), the emulation also reports data
// races, whatever the order the schedule draws: every thread is a ThreadSanitizer fiber,
// switched to without synchronisation, and the instructions that gather threads are the only
// happens-before edges between a block's threads (tdsl_race_* below). So two threads'
// unordered accesses to one place, one of them a write, are reported even when the schedule
// happens to order them well, or when both write the same value. The blocks of a launch that
// uses shared memory run one after another and are ordered (they reuse the statics that stand
// for it); a launch whose blocks share nothing (a thread or a warp per grid iteration) runs all
// its threads, every block's, as unordered fibers of one run (tdsl_emu_launch_apart), warps
// still meeting at their shuffles.
#include <vector>
#include <sys/mman.h>
#ifdef TDSL_EMU_RACES
#include <sanitizer/tsan_interface.h>
// Ignore this fiber's reads and writes from here to the matching end.
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

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
// Inlined, so that the race detector's record of calls stays with the fiber that made them.
__attribute__((always_inline)) static inline void tdsl_emu_ctx_swap(tdsl_emu_ctx &from, tdsl_emu_ctx &to) {
  tdsl_emu_swap(&from.sp, to.sp);
}
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
  unsigned passed[3];  // the block barriers, warp and warpgroup instructions passed
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

// The race detector's view (TDSL_EMU_RACES): a ThreadSanitizer fiber for each emulated thread
// and one for each warp and warpgroup, which performs the group's instructions, all kept from
// block to block; and two synchronisation objects for each group. A thread releases its
// group's object as it arrives at an instruction, the performer acquires it, performs the
// instruction and releases it, and the threads acquire it as they resume. A group's
// instructions alternate between its two objects, so a thread that resumes late does not
// acquire what a thread that ran ahead did after the instruction. The scheduler's own accesses
// are ignored (it reads what threads wrote only to choose who runs next); it acquires what a
// block's threads did as they end (tdsl_race_done) and releases it to the next block's
// (tdsl_race_start).
#ifdef TDSL_EMU_RACES
// A group's performer: a fiber of its own, with its own stack, so that its scratch is not
// another performer's.
struct tdsl_race_performer {
  void *fiber;
  tdsl_emu_ctx ctx;
};
struct tdsl_race_state {
  void *sched;                                // the scheduler's fiber: the program's thread
  std::vector<void *> threads;                // by fiber
  std::vector<tdsl_race_performer> performers;  // by group: the warps, then the warpgroups
  std::vector<char> sync;                     // 16 bytes (two objects) for the block, each warp, each warpgroup
  int warps;
  // The instruction being performed: its group's first thread, size, performer and object.
  int group, size, performer;
  void *object;
};
static tdsl_race_state tdsl_race;
static char tdsl_race_start, tdsl_race_done;
static void *tdsl_race_sync(int state, int t, unsigned passed) {
  const long group = state == TDSL_EMU_BAR ? 0 : state == TDSL_EMU_WARP ? 1 + t / 32 : 1 + tdsl_race.warps + t / 128;
  return tdsl_race.sync.data() + 16 * group + 8 * (passed & 1);
}
#endif

static tdsl_emu_fiber &tdsl_emu_me() { return tdsl_emu_fibers[tdsl_emu_self]; }
// Wait at an instruction of a group (`state`) until the scheduler has performed it.
static void tdsl_emu_wait(int state, int op) {
  tdsl_emu_fiber &f = tdsl_emu_me();
  f.state = state;
  f.op = op;
#ifdef TDSL_EMU_RACES
  const bool group = state != TDSL_EMU_DONE;
  void *sync = group ? tdsl_race_sync(state, tdsl_emu_self, f.passed[state - TDSL_EMU_BAR]) : &tdsl_race_done;
  __tsan_release(sync);
  __tsan_switch_to_fiber(tdsl_race.sched, __tsan_switch_to_fiber_no_sync);
#endif
  tdsl_emu_ctx_swap(f.ctx, tdsl_emu_sched);
#ifdef TDSL_EMU_RACES
  __tsan_acquire(sync);
  if (group) f.passed[state - TDSL_EMU_BAR]++;
#endif
}
// A fiber runs the kernel once, then waits for good: the scheduler never resumes a done thread.
static void tdsl_emu_entry() {
#ifdef TDSL_EMU_RACES
  __tsan_acquire(&tdsl_race_start);
#endif
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

#ifdef TDSL_EMU_RACES
// Fibers and objects for a block of `threads` threads; what the scheduler did before (and the
// blocks before this one) happens before its threads start.
// A performer's life: perform the instruction the scheduler names, return to it, again.
static void tdsl_race_performer_entry() {
  for (;;) {
    tdsl_race_state &r = tdsl_race;
    __tsan_acquire(r.object);
    tdsl_emu_perform(&tdsl_emu_fibers[r.group], r.size, r.group / r.size);
    __tsan_release(r.object);
    __tsan_switch_to_fiber(r.sched, __tsan_switch_to_fiber_no_sync);
    tdsl_emu_ctx_swap(r.performers[r.performer].ctx, tdsl_emu_sched);
  }
}
// Its threads are named as the device numbers them (a block of `per_block` threads; in a run
// `apart`, fiber t is thread t mod per_block of block t / per_block).
static void tdsl_race_block_start(int threads, int per_block, bool apart) {
  tdsl_race.warps = (threads + 31) / 32;
  const int groups = tdsl_race.warps + (threads + 127) / 128;
  while ((int)tdsl_race.threads.size() < threads) tdsl_race.threads.push_back(__tsan_create_fiber(0));
  for (int t = 0; t < threads; t++) {
    char name[64];
    snprintf(name, sizeof name, "block %lld thread %d", apart ? t / per_block : blockIdx.x, apart ? t % per_block : t);
    __tsan_set_fiber_name(tdsl_race.threads[t], name);
  }
  while ((int)tdsl_race.performers.size() < groups) {
    // Its stack is kept as long as the performer, which waits in it from one launch to the next.
    void *stack = mmap(nullptr, TDSL_EMU_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stack == MAP_FAILED) tdsl_emu_fail("no memory for a performer's stack");
    tdsl_race_performer p{__tsan_create_fiber(0), {}};
    tdsl_emu_ctx_make(p.ctx, (char *)stack, TDSL_EMU_STACK, tdsl_race_performer_entry);
    tdsl_race.performers.push_back(p);
  }
  for (int g = 0; g < groups; g++) {
    char name[64];
    const int first = g < tdsl_race.warps ? 32 * g : 128 * (g - tdsl_race.warps);  // its first thread
    const long long block = apart ? first / per_block : blockIdx.x;
    const int at = apart ? first % per_block : first;
    if (g < tdsl_race.warps) snprintf(name, sizeof name, "block %lld warp %d (its warp-wide instructions)", block, at / 32);
    else snprintf(name, sizeof name, "block %lld warpgroup %d (its wgmma)", block, at / 128);
    __tsan_set_fiber_name(tdsl_race.performers[g].fiber, name);
  }
  tdsl_race.sync.assign(16 * (1 + groups), 0);
  __tsan_release(&tdsl_race_start);
}
#endif

// Performs the instruction the group of `size` threads from `g` waits at (for the race
// detector, on the group's performer).
static void tdsl_emu_perform_group(int g, int size) {
  tdsl_emu_fiber *w = &tdsl_emu_fibers[g];
#ifdef TDSL_EMU_RACES
  tdsl_race_state &r = tdsl_race;
  const int state = w[0].state;
  r.group = g;
  r.size = size;
  r.performer = size == 32 ? g / 32 : r.warps + g / 128;
  r.object = tdsl_race_sync(state, g, w[0].passed[state - TDSL_EMU_BAR]);
  __tsan_switch_to_fiber(r.performers[r.performer].fiber, __tsan_switch_to_fiber_no_sync);
  tdsl_emu_ctx_swap(tdsl_emu_sched, r.performers[r.performer].ctx);
#else
  tdsl_emu_perform(w, size, g / size);
#endif
}

// The stacks of `fibers` fibers, mapped as they are first touched.
static char *tdsl_emu_stacks(int fibers) {
  static char *base = nullptr;
  static size_t have = 0;
  const size_t need = (size_t)fibers * TDSL_EMU_STACK;
  if (need > have) {
    if (base) munmap(base, have);
    void *m = mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) tdsl_emu_fail("no memory for the emulated threads' stacks");
    base = (char *)m;
    have = need;
  }
  return base;
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
//
// With `apart` (blocks that share nothing: no shared memory, no block barriers), every thread
// of every block is a fiber of one run, so the race detector sees threads of different blocks
// as unordered too; warps (32 fibers from a multiple of 32) still meet at their instructions.
static void tdsl_emu_run(long long blocks, int threads, void (*body)(void *), void *data, bool apart) {
  const int fibers = apart ? (int)(blocks * threads) : threads;
  char *stacks = tdsl_emu_stacks(fibers);
  gridDim.x = blocks;
  blockDim.x = threads;
  tdsl_emu_body = body;
  tdsl_emu_body_data = data;
  const int warps = (fibers + 31) / 32;
  std::vector<long long> block_order(apart ? 1 : blocks), rank(warps);
  std::vector<std::vector<int>> ready(warps);  // a warp's ready lanes
  tdsl_emu_order(block_order.data(), (long long)block_order.size());
#ifdef TDSL_EMU_RACES
  __tsan_ignore_thread_begin();
  tdsl_race.sched = __tsan_get_current_fiber();
#endif
  const auto make_ready = [&](int t) {
    tdsl_emu_fibers[t].state = TDSL_EMU_RUN;
    ready[t / 32].push_back(t);
  };
  for (long long bx : block_order) {
    blockIdx.x = bx;
    if (tdsl_emu_tc.block_start) tdsl_emu_tc.block_start(fibers);
    tdsl_emu_fibers.assign(fibers, tdsl_emu_fiber{});
    for (int t = 0; t < fibers; t++) {
      tdsl_emu_fiber &f = tdsl_emu_fibers[t];
      tdsl_emu_ctx_make(f.ctx, stacks + (size_t)t * TDSL_EMU_STACK, TDSL_EMU_STACK, tdsl_emu_entry);
      make_ready(t);
    }
#ifdef TDSL_EMU_RACES
    tdsl_race_block_start(fibers, threads, apart);
#endif
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
      threadIdx.x = apart ? t % threads : t;
      if (apart) blockIdx.x = t / threads;
#ifdef TDSL_EMU_RACES
      __tsan_switch_to_fiber(tdsl_race.threads[t], __tsan_switch_to_fiber_no_sync);
#endif
      tdsl_emu_ctx_swap(tdsl_emu_sched, tdsl_emu_fibers[t].ctx);
      const tdsl_emu_fiber &f = tdsl_emu_fibers[t];
      if (f.state == TDSL_EMU_DONE) {
        done++;
      } else if (f.state == TDSL_EMU_BAR) {
        if (++bar == fibers) {
          bar = 0;
          for (int u = 0; u < fibers; u++) make_ready(u);
          tdsl_emu_order(rank.data(), warps);
        }
      } else {
        const int size = f.state == TDSL_EMU_WARP ? 32 : 128;
        const int g = t / size * size;
        tdsl_emu_fiber *w = &tdsl_emu_fibers[g];
        bool all = g + size <= fibers;
        for (int l = 0; all && l < size; l++) all = w[l].state == f.state && w[l].op == f.op;
        if (all) {
          tdsl_emu_perform_group(g, size);
          for (int l = 0; l < size; l++) make_ready(g + l);
        }
      }
    }
    if (done != fibers) {
      threadIdx.x = 0;
      tdsl_emu_fail("threads wait at instructions that can never complete (divergent barrier or warp instruction)");
    }
    if (tdsl_emu_tc.block_end) tdsl_emu_tc.block_end();
#ifdef TDSL_EMU_RACES
    __tsan_acquire(&tdsl_race_done);
#endif
  }
#ifdef TDSL_EMU_RACES
  __tsan_ignore_thread_end();
#endif
}

// tdsl_emu_run for a callable (the emulator's main passes a lambda per launch).
template <typename F> static void tdsl_emu_launch(long long blocks, int threads, F body) {
  tdsl_emu_run(blocks, threads, [](void *f) { (*static_cast<F *>(f))(); }, &body, false);
}
// The same for blocks that share nothing: all their threads fibers of one run (the race check).
template <typename F> static void tdsl_emu_launch_apart(long long blocks, int threads, F body) {
  tdsl_emu_run(blocks, threads, [](void *f) { (*static_cast<F *>(f))(); }, &body, true);
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

