// PipelineExecutor: runs one rank's lowered action list for one step. It only executes;
// what to do and in which order is decided by the schedule library (pipeline/).
//   RECV_*  posts a non-blocking receive straight into the stage's buffer;
//   F/I/B   wait for their input only when they start (so receives overlap compute);
//   SEND_*  are non-blocking; a send is completed before the microbatch's W frees the
//           buffer it reads, and every request is checked complete at the end of the step;
//   stages on the same rank hand tensors over in memory, no message.
// The host never waits for the backend between compute actions: an action's ops are issued
// and the host goes on to the next one (on a GPU the stream orders them). An action's time
// comes from the backend's op clock (backend/ops.h: events on the compute stream on cuda),
// marks before and after it that are read once the program has been issued, together with
// the microbatches' losses (the head writes each where the step's losses gather; one copy
// reads them). So a GPU runs one action after another while the host issues the next,
// instead of idling at each action's end.
// On the timeline, compute actions are on track 0 (device time: as the backend ran them,
// aligned at the moment the last one was seen done), the host's receive waits on
// kWaitTrack; every transfer is a slice on track kTransferTrack from its posting to the
// moment its completion was seen (a receive when its consumer waits for it, a send when it
// is polled between actions or waited for at the step's end): a late end can mean a late
// poll, never an early one. A receive whose wait only orders the device (NCCL: the compute
// stream waits for it, the host goes on) stays pending, polled between actions like a send
// and listed to the watchdog, until its completion is seen.
// While the host would wait for a receive that has not arrived, it asks its stages to
// prepare the weights their passes of the step read (Stage::prepare_weights: where the cpu
// backend packs them, work each pass's first microbatch did before), in the order the program
// first needs them, one weight at a time until the receive is there: in a schedule's warm-up
// the later ranks wait a forward or more for their first input, and that wait now takes the
// packing off the path every rank waits on. A stage is prepared only from its first F on, where
// ZeRO-1 has gathered its weights (the hook below). The time is a "prepare" slice among the
// compute actions.
// Stage hooks (set_stage_hooks) let the caller act where a stage's part of the step begins
// and ends on this rank: before its first F (ZeRO-1 waits there for that stage's weights)
// and after its last W or B (its gradients are complete: ZeRO-1 starts their
// reduce-scatter while the rest of the step runs).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/buffer.h"
#include "core/communicator.h"
#include "core/faults.h"
#include "model/layer.h"
#include "model/stage.h"
#include "pipeline/ir.h"
#include "runtime/timeline.h"
#include "runtime/watchdog.h"

namespace pptrain {

class PipelineExecutor {
 public:
  static constexpr int kTransferTrack = 2;  // the timeline track of transfers (1: ZeRO-1's)
  static constexpr int kWaitTrack = 5;      // the host's waits for receives (3, 4: op profile)
  // `stages`: global stage index -> the Stages on this rank (at least one, all of one
  // precision); `schedule` is lowered. `faults`: the planted faults acting on this rank
  // (drop_microbatch, sync_each_action; tests only).
  PipelineExecutor(Ops& ops, std::map<int, Stage*> stages, const pipeline::Schedule& schedule,
                   int pp_rank, Communicator& pp_comm, const Faults& faults = {});
  // Runs the step. data[mb] holds the microbatch's tokens/targets (read by the first and
  // last stage). Returns the summed loss of the microbatches whose last stage is here.
  double run(const std::vector<MicrobatchData>& data, Timeline& timeline);
  // After a forward-only program (evaluation): drops every microbatch's activations.
  void discard(int microbatches);
  // Reports each completed action and receive to `progress` (nullptr: none), and before
  // each wait what it waits for (runtime/watchdog.h). `progress` must outlive the runs.
  void set_progress(Progress* progress) { progress_ = progress; }
  struct StageHooks {
    std::function<void(int stage)> before_first_forward;  // before the F is timed
    std::function<void(int stage)> after_last_backward;   // once the W (or B) has ended
  };
  void set_stage_hooks(StageHooks hooks) { hooks_ = std::move(hooks); }

 private:
  // What a transfer carries: a stage's input (forward) or its output gradient (backward).
  enum class Direction { Forward = 0, Backward = 1 };
  using Key = std::tuple<Direction, int, int>;  // (direction, receiving stage, microbatch)
  int rank_of(int stage) const;
  bool local(int stage) const { return stages_.count(stage) > 0; }
  // The MPI/NCCL tag of the transfer to `stage` of microbatch `mb`: unique within a step.
  int tag(Direction direction, int stage, int mb) const;
  void wait_recv(const Key& key, Timeline& timeline);
  std::string recv_name(const Key& key) const;  // "1RECV_F3"
  // Ends the slices of the device-waited receives seen complete (all: every one must be).
  void poll_device_recvs(bool all);
  // A transfer's slice on the transfer track, ending now.
  void transfer_done(const std::string& name, double posted_us);
  // Around a compute action: marks on the op clock, resolved into timeline events by
  // finish_compute() once the program has been issued.
  void begin_compute(const pipeline::Action& a);
  void begin_compute(std::string name);
  void end_compute();
  void finish_compute(Timeline& timeline);
  // After a microbatch's W (or B) its stage tensors are freed once every send that reads
  // them has been posted (its last SEND_* position is behind us) and has completed; until
  // then they wait in `unreleased_`, polled between actions (never blocking mid-step).
  void finish_microbatch(Stage& stage, int mb);
  void poll_unreleased(bool wait_all);
  // For the watchdog, before a wait that may block on another rank: the action, what it
  // waits for and every transfer still pending (peer pp ranks and tags).
  void report_wait(const pipeline::Action& a, const std::string& what);
  void tick() { if (progress_) progress_->tick(); }
  // Prepares stages' weights (prepare_order_ from next_prepare_ on) while `pending` is not complete.
  void prepare_ahead(Request& pending);

  Ops& ops_;
  std::map<int, Stage*> stages_;
  const pipeline::Schedule& schedule_;
  int pp_rank_;
  Communicator& pp_;
  size_t bytes_;  // per transfer: one [N,C] tensor of the stages' precision
  int total_stages_;
  struct PendingRecv {
    std::unique_ptr<Request> request;
    double posted_us;
  };
  struct PendingSend {
    pipeline::Op op;  // SEND_F or SEND_B
    std::unique_ptr<Request> request;
    double posted_us;
  };
  std::map<Key, PendingRecv> recvs_;
  // Receives that the device waits for (Request::on_device) and whose completion the host
  // has not seen yet: polled between actions, checked complete once the program has run.
  std::map<Key, PendingRecv> device_recvs_;
  std::multimap<std::pair<int, int>, PendingSend> sends_;  // (stage, mb) -> its sends
  Timeline* timeline_ = nullptr;                           // the running step's
  std::unique_ptr<OpClock> clock_;                         // made at the first run
  struct ComputeSpan {
    std::string name;    // IR notation
    size_t begin, end;   // its marks
  };
  std::vector<ComputeSpan> computed_;  // this run's compute actions, in issue order
  size_t marks_ = 0;                   // marks used in this run
  Buffer<double> losses_;              // [last-stage F actions of a run]: their summed losses
  size_t loss_count_ = 0;              // of this run
  std::vector<std::pair<Stage*, int>> unreleased_;                      // (stage, mb)
  std::map<std::pair<int, int>, size_t> last_send_;  // (stage, mb) -> position of its last SEND_*
  size_t position_ = 0;                              // of the action being run
  int dropped_microbatch_ = -1;                      // planted fault drop_microbatch: its W is skipped
  bool sync_each_action_ = false;                    // planted fault sync_each_action
  std::map<int, size_t> first_forward_, last_backward_;  // stage -> position of its first F, last W or B
  // (stage, dgrad) in the order the program first runs the stage's forward (false) and input
  // gradient (true, by an I or a B); those before next_prepare_ are prepared in this run.
  std::vector<std::pair<int, bool>> prepare_order_;
  size_t next_prepare_ = 0;
  int next_weight_ = 0;  // of prepare_order_[next_prepare_], the next to ask for
  StageHooks hooks_;
  Progress* progress_ = nullptr;
};

}  // namespace pptrain
