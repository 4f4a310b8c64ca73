#include "runtime/executor.h"

#include "core/error.h"

namespace pptrain {

using pipeline::Op;

namespace {

// Bytes of one stage-to-stage transfer: the same for every stage of the rank.
size_t transfer_bytes(const std::map<int, Stage*>& stages, int pp_rank) {
  PPTRAIN_CHECK(!stages.empty(), "pp rank ", pp_rank, " holds no stage");
  const auto& [first, first_stage] = *stages.begin();
  const size_t bytes = first_stage->transfer_bytes();
  for (auto& [index, stage] : stages)
    PPTRAIN_CHECK(stage->transfer_bytes() == bytes, "stage ", index, " transfers ", stage->transfer_bytes(),
                  " bytes, stage ", first, " ", bytes);
  return bytes;
}

}  // namespace

PipelineExecutor::PipelineExecutor(Ops& ops, std::map<int, Stage*> stages,
                                   const pipeline::Schedule& schedule, int pp_rank,
                                   Communicator& pp_comm, const Faults& faults)
    : ops_(ops), stages_(std::move(stages)), schedule_(schedule), pp_rank_(pp_rank), pp_(pp_comm),
      bytes_(transfer_bytes(stages_, pp_rank)), total_stages_(schedule.pp * schedule.stages_per_rank) {
  if (const Fault* f = faults.find("drop_microbatch")) dropped_microbatch_ = std::stoi(f->target);
  const auto& actions = schedule_.program.at(pp_rank_);
  for (size_t pos = 0; pos < actions.size(); ++pos)
    if (actions[pos].op == Op::SEND_F || actions[pos].op == Op::SEND_B)
      last_send_[{actions[pos].stage, actions[pos].microbatch}] = pos;
}

int PipelineExecutor::rank_of(int stage) const {
  return pipeline::rank_of_stage(schedule_.placement, stage, schedule_.pp);
}

void PipelineExecutor::discard(int microbatches) {
  for (auto& [s, stage] : stages_)
    for (int mb = 0; mb < microbatches; ++mb) stage->discard(mb);
}

int PipelineExecutor::tag(Direction direction, int stage, int mb) const {
  return (mb * total_stages_ + stage) * 2 + int(direction);
}

void PipelineExecutor::wait_recv(const Key& key, Timeline& timeline) {
  auto it = recvs_.find(key);
  if (it == recvs_.end()) return;  // produced on this rank
  double t0 = timeline.now_us();
  it->second->wait();
  double t1 = timeline.now_us();
  auto [dir, stage, mb] = key;
  timeline.add(cat("wait ", stage, dir == Direction::Forward ? "RECV_F" : "RECV_B", mb), t0, t1, false);
  recvs_.erase(it);
}

void PipelineExecutor::finish_microbatch(Stage& stage, int mb) {
  unreleased_.push_back({&stage, mb});
  poll_unreleased(false);
}

void PipelineExecutor::poll_unreleased(bool wait_all) {
  for (size_t i = 0; i < unreleased_.size();) {
    auto [stage, mb] = unreleased_[i];
    auto last = last_send_.find({stage->spec().index, mb});
    if (!wait_all && last != last_send_.end() && last->second >= position_) { ++i; continue; }
    auto range = sends_.equal_range({stage->spec().index, mb});
    bool done = true;
    for (auto it = range.first; it != range.second; ++it) {
      if (wait_all) it->second->wait();
      else done = done && it->second->test();
    }
    if (!done) { ++i; continue; }
    sends_.erase(range.first, range.second);
    stage->release(mb);
    unreleased_.erase(unreleased_.begin() + i);
  }
}

// A compute action's end on the timeline. The cuda backend only queues work, so the host
// waits for the compute stream first: the bubble and the trace then show when the GPU ran
// the action, not when the host queued it. The cost is one launch latency per action
// (microseconds against milliseconds of work); transfers on their own streams go on.
void PipelineExecutor::end_compute(const pipeline::Action& a, double start_us, Timeline& timeline) {
  ops_.synchronize();
  timeline.add(pipeline::to_string(a), start_us, timeline.now_us(), true);
}

double PipelineExecutor::run(const std::vector<MicrobatchData>& data, Timeline& timeline) {
  double loss = 0;
  const auto& actions = schedule_.program.at(pp_rank_);
  for (size_t pos = 0; pos < actions.size(); ++pos) {
    position_ = pos;
    if (!unreleased_.empty()) poll_unreleased(false);
    const pipeline::Action& a = actions[pos];
    const int s = a.stage, mb = a.microbatch;
    auto stage_here = [&](int st) -> Stage& {
      auto it = stages_.find(st);
      PPTRAIN_CHECK(it != stages_.end(), "rank ", pp_rank_, " action ", pipeline::to_string(a),
                    " at position ", pos, ": stage ", st, " is not on this rank");
      return *it->second;
    };
    switch (a.op) {
      case Op::RECV_F:
        recvs_[{Direction::Forward, s, mb}] =
            pp_.irecv(stage_here(s).input(mb), bytes_, rank_of(s - 1), tag(Direction::Forward, s, mb));
        break;
      case Op::RECV_B:
        recvs_[{Direction::Backward, s, mb}] =
            pp_.irecv(stage_here(s).output_grad(mb), bytes_, rank_of(s + 1), tag(Direction::Backward, s, mb));
        break;
      case Op::SEND_F:
        sends_.emplace(std::make_pair(s, mb),
                       pp_.isend(stage_here(s).output(mb), bytes_, rank_of(s + 1), tag(Direction::Forward, s + 1, mb)));
        break;
      case Op::SEND_B:
        sends_.emplace(std::make_pair(s, mb),
                       pp_.isend(stage_here(s).input_grad(mb), bytes_, rank_of(s - 1), tag(Direction::Backward, s - 1, mb)));
        break;
      case Op::F: {
        Stage& st = stage_here(s);
        wait_recv({Direction::Forward, s, mb}, timeline);
        double t0 = timeline.now_us();
        st.forward(mb, data.at(mb));
        if (st.spec().has_head) loss += st.loss_sum(mb);
        if (local(s + 1)) {  // hand over to the next stage on this rank
          ops_.copy(stage_here(s + 1).input(mb), st.output(mb), bytes_);
        }
        end_compute(a, t0, timeline);
        break;
      }
      case Op::B:
      case Op::I: {
        Stage& st = stage_here(s);
        wait_recv({Direction::Backward, s, mb}, timeline);
        double t0 = timeline.now_us();
        st.backward_input(mb);
        if (s > 0 && local(s - 1)) {
          ops_.copy(stage_here(s - 1).output_grad(mb), st.input_grad(mb), bytes_);
        }
        if (a.op == Op::B && mb == dropped_microbatch_) st.skip_weight(mb, /*keep_io=*/true);
        else if (a.op == Op::B) st.backward_weight(mb, /*keep_io=*/true);
        end_compute(a, t0, timeline);
        if (a.op == Op::B) finish_microbatch(st, mb);
        break;
      }
      case Op::W: {
        Stage& st = stage_here(s);
        double t0 = timeline.now_us();
        if (mb == dropped_microbatch_) st.skip_weight(mb, /*keep_io=*/true);
        else st.backward_weight(mb, /*keep_io=*/true);
        end_compute(a, t0, timeline);
        finish_microbatch(st, mb);
        break;
      }
    }
  }
  poll_unreleased(/*wait_all=*/true);
  for (auto& [key, req] : sends_) req->wait();  // sends of microbatches without W (evaluation)
  sends_.clear();
  if (!recvs_.empty()) {
    auto [dir, s, mb] = recvs_.begin()->first;
    fail("pipeline rank ", pp_rank_, ": receive ", s, dir == Direction::Forward ? "RECV_F" : "RECV_B", mb,
         " was posted but never used by the program");
  }
  return loss;
}

}  // namespace pptrain
