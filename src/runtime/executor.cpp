#include "runtime/executor.h"

#include <algorithm>

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

// What a compute action waits for: the backend, and inside the layers the tp group's
// all-reduces (a frozen tp peer blocks there).
constexpr const char* kComputing = "its computation (and the tp group's all-reduces in it)";

}  // namespace

PipelineExecutor::PipelineExecutor(Ops& ops, std::map<int, Stage*> stages,
                                   const pipeline::Schedule& schedule, int pp_rank,
                                   Communicator& pp_comm, const Faults& faults)
    : ops_(ops), stages_(std::move(stages)), schedule_(schedule), pp_rank_(pp_rank), pp_(pp_comm),
      bytes_(transfer_bytes(stages_, pp_rank)), total_stages_(schedule.pp * schedule.stages_per_rank) {
  if (const Fault* f = faults.find("drop_microbatch")) dropped_microbatch_ = std::stoi(f->target);
  sync_each_action_ = faults.find("sync_each_action") != nullptr;
  const auto& actions = schedule_.program.at(pp_rank_);
  size_t losses = 0;
  for (size_t pos = 0; pos < actions.size(); ++pos) {
    const pipeline::Action& a = actions[pos];
    if (a.op == Op::SEND_F || a.op == Op::SEND_B) last_send_[{a.stage, a.microbatch}] = pos;
    if (a.op == Op::F) first_forward_.emplace(a.stage, pos);  // keeps the first
    if (a.op == Op::F || a.op == Op::I || a.op == Op::B) {
      const std::pair<int, bool> need{a.stage, a.op != Op::F};
      if (std::find(prepare_order_.begin(), prepare_order_.end(), need) == prepare_order_.end())
        prepare_order_.push_back(need);
    }
    if (a.op == Op::W || a.op == Op::B) last_backward_[a.stage] = pos;
    if (a.op == Op::F && local(a.stage) && stages_.at(a.stage)->spec().has_head) ++losses;
  }
  if (losses) losses_ = Buffer<double>(ops_, losses);
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

void PipelineExecutor::report_wait(const pipeline::Action& a, const std::string& what) {
  if (!progress_) return;
  const auto& actions = schedule_.program.at(pp_rank_);
  std::string pending;
  for (const auto* recvs : {&recvs_, &device_recvs_})
    for (const auto& [key, req] : *recvs) {
      auto [dir, s, mb] = key;
      const bool fwd = dir == Direction::Forward;
      pending += cat(pending.empty() ? "" : ", ", recv_name(key), " from pp rank ", rank_of(fwd ? s - 1 : s + 1),
                     " tag ", tag(dir, s, mb), recvs == &device_recvs_ ? " (the device waits for it)" : "");
    }
  for (const auto& [key, send] : sends_) {
    auto [s, mb] = key;
    const bool fwd = send.op == Op::SEND_F;
    pending += cat(pending.empty() ? "" : ", ", s, fwd ? "SEND_F" : "SEND_B", mb, " to pp rank ",
                   rank_of(fwd ? s + 1 : s - 1), " tag ",
                   fwd ? tag(Direction::Forward, s + 1, mb) : tag(Direction::Backward, s - 1, mb));
  }
  progress_->set_activity(cat("pp rank ", pp_rank_, " at action ", position_ + 1, "/", actions.size(), " (",
                              pipeline::to_string(a), ") waits for ", what, "; pending transfers: [",
                              pending.empty() ? "none" : pending, "]"));
}

void PipelineExecutor::wait_recv(const Key& key, Timeline& timeline) {
  auto it = recvs_.find(key);
  if (it == recvs_.end()) return;  // produced on this rank
  auto [dir, stage, mb] = key;
  const bool fwd = dir == Direction::Forward;
  if (progress_) {
    const auto& a = schedule_.program.at(pp_rank_).at(position_);
    report_wait(a, cat(stage, fwd ? "RECV_F" : "RECV_B", mb, " from pp rank ", rank_of(fwd ? stage - 1 : stage + 1),
                       " tag ", tag(dir, stage, mb)));
  }
  if (!it->second.request->on_device()) prepare_ahead(*it->second.request);
  double t0 = timeline.now_us();
  it->second.request->wait();
  tick();
  if (it->second.request->on_device()) {  // ordered on the device; the host did not wait
    device_recvs_.insert(recvs_.extract(it));
    return;
  }
  double t1 = timeline.now_us();
  const std::string name = recv_name(key);
  timeline.add("wait " + name, t0, t1, false, kWaitTrack);
  transfer_done(name, it->second.posted_us);
  recvs_.erase(it);
}

std::string PipelineExecutor::recv_name(const Key& key) const {
  auto [dir, stage, mb] = key;
  return cat(stage, dir == Direction::Forward ? "RECV_F" : "RECV_B", mb);
}

void PipelineExecutor::poll_device_recvs(bool all) {
  for (auto it = device_recvs_.begin(); it != device_recvs_.end();) {
    if (!it->second.request->test()) {
      // The compute stream waited for every one of them before the program's last action
      // ended, which the host has seen when `all`: one still pending is a broken order.
      PPTRAIN_CHECK(!all, "pipeline rank ", pp_rank_, ": receive ", recv_name(it->first),
                    " is not complete after the step's actions that waited for it");
      ++it;
      continue;
    }
    transfer_done(recv_name(it->first), it->second.posted_us);
    it = device_recvs_.erase(it);
  }
}

void PipelineExecutor::transfer_done(const std::string& name, double posted_us) {
  if (timeline_) timeline_->add(name, posted_us, timeline_->now_us(), false, kTransferTrack);
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
      const bool complete = it->second.request->test();  // no wait for a send already done
      if (wait_all && !complete) it->second.request->wait();
      done = done && (wait_all || complete);
    }
    if (!done) { ++i; continue; }
    for (auto it = range.first; it != range.second; ++it)
      transfer_done(cat(it->first.first, it->second.op == Op::SEND_F ? "SEND_F" : "SEND_B", it->first.second),
                    it->second.posted_us);
    sends_.erase(range.first, range.second);
    stage->release(mb);
    unreleased_.erase(unreleased_.begin() + i);
  }
}

void PipelineExecutor::begin_compute(const pipeline::Action& a) { begin_compute(pipeline::to_string(a)); }

void PipelineExecutor::begin_compute(std::string name) {
  computed_.push_back({std::move(name), marks_, marks_ + 1});
  clock_->mark(marks_++);
}

void PipelineExecutor::prepare_ahead(Request& pending) {
  const auto keep_going = [&pending] { return !pending.test(); };
  bool began = false;
  while (next_prepare_ < prepare_order_.size() && keep_going()) {
    const auto [s, dgrad] = prepare_order_[next_prepare_];
    // Before its first F a stage's weights may still be arriving (ZeRO-1's gather).
    if (first_forward_.count(s) == 0 || first_forward_.at(s) > position_) break;
    if (!began) begin_compute("prepare");
    began = true;
    next_weight_ = stages_.at(s)->prepare_weights(dgrad, next_weight_, keep_going);
    if (next_weight_ == Stage::kNothingKept) {  // a backend without copies (cuda): no slice, no more asking
      computed_.pop_back();
      --marks_;
      next_prepare_ = prepare_order_.size();
      return;
    }
    if (next_weight_ >= 0) break;  // the receive is here: the next wait goes on from there
    next_weight_ = 0;
    ++next_prepare_;
  }
  if (began) end_compute();
}

void PipelineExecutor::end_compute() {
  clock_->mark(marks_++);
  if (sync_each_action_) ops_.synchronize();
  tick();
}

// The compute actions on the timeline, from their marks: the host waits here, once, for the
// backend to run what the program issued (cuda: the last mark's event), and the times are
// placed so that the last action ends now. On a GPU the host is then at most a few
// microseconds behind the device's end; on the cpu backend the marks are the host's clock.
void PipelineExecutor::finish_compute(Timeline& timeline) {
  if (!marks_) return;
  const std::vector<double> ms = clock_->resolve(marks_);
  const double end_us = timeline.now_us(), last_ms = ms.back();
  for (const ComputeSpan& c : computed_)
    timeline.add(c.name, end_us - (last_ms - ms[c.begin]) * 1000.0, end_us - (last_ms - ms[c.end]) * 1000.0, true);
  computed_.clear();
  marks_ = 0;
}

double PipelineExecutor::run(const std::vector<MicrobatchData>& data, Timeline& timeline) {
  timeline_ = &timeline;
  if (!clock_) clock_ = ops_.make_op_clock();
  computed_.clear();
  marks_ = loss_count_ = 0;
  next_prepare_ = 0;
  next_weight_ = 0;
  const auto& actions = schedule_.program.at(pp_rank_);
  for (size_t pos = 0; pos < actions.size(); ++pos) {
    position_ = pos;
    if (!unreleased_.empty()) poll_unreleased(false);
    if (!device_recvs_.empty()) poll_device_recvs(false);
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
        recvs_[{Direction::Forward, s, mb}] = {
            pp_.irecv(stage_here(s).input(mb), bytes_, rank_of(s - 1), tag(Direction::Forward, s, mb)),
            timeline.now_us()};
        break;
      case Op::RECV_B:
        recvs_[{Direction::Backward, s, mb}] = {
            pp_.irecv(stage_here(s).output_grad(mb), bytes_, rank_of(s + 1), tag(Direction::Backward, s, mb)),
            timeline.now_us()};
        break;
      case Op::SEND_F:
        sends_.emplace(std::make_pair(s, mb),
                       PendingSend{Op::SEND_F, pp_.isend(stage_here(s).output(mb), bytes_, rank_of(s + 1),
                                                         tag(Direction::Forward, s + 1, mb)),
                                   timeline.now_us()});
        break;
      case Op::SEND_B:
        sends_.emplace(std::make_pair(s, mb),
                       PendingSend{Op::SEND_B, pp_.isend(stage_here(s).input_grad(mb), bytes_, rank_of(s - 1),
                                                         tag(Direction::Backward, s - 1, mb)),
                                   timeline.now_us()});
        break;
      case Op::F: {
        Stage& st = stage_here(s);
        if (hooks_.before_first_forward && first_forward_.at(s) == pos) hooks_.before_first_forward(s);
        wait_recv({Direction::Forward, s, mb}, timeline);
        report_wait(a, kComputing);
        begin_compute(a);
        MicrobatchData d = data.at(mb);
        if (st.spec().has_head) {  // the loss into the step's next slot
          PPTRAIN_CHECK(loss_count_ < losses_.size(), "pp rank ", pp_rank_,
                        ": more last-stage forwards than the program holds");
          d.loss_sum = losses_.data() + loss_count_++;
        }
        st.forward(mb, d);
        if (local(s + 1)) {  // hand over to the next stage on this rank
          ops_.copy(stage_here(s + 1).input(mb), st.output(mb), bytes_);
        }
        end_compute();
        break;
      }
      case Op::B:
      case Op::I: {
        Stage& st = stage_here(s);
        wait_recv({Direction::Backward, s, mb}, timeline);
        report_wait(a, kComputing);
        begin_compute(a);
        st.backward_input(mb);
        if (s > 0 && local(s - 1)) {
          ops_.copy(stage_here(s - 1).output_grad(mb), st.input_grad(mb), bytes_);
        }
        if (a.op == Op::B && mb == dropped_microbatch_) st.skip_weight(mb, /*keep_io=*/true);
        else if (a.op == Op::B) st.backward_weight(mb, /*keep_io=*/true);
        end_compute();
        if (a.op == Op::B) finish_microbatch(st, mb);
        if (a.op == Op::B && hooks_.after_last_backward && last_backward_.at(s) == pos) hooks_.after_last_backward(s);
        break;
      }
      case Op::W: {
        Stage& st = stage_here(s);
        report_wait(a, kComputing);
        begin_compute(a);
        if (mb == dropped_microbatch_) st.skip_weight(mb, /*keep_io=*/true);
        else st.backward_weight(mb, /*keep_io=*/true);
        end_compute();
        finish_microbatch(st, mb);
        if (hooks_.after_last_backward && last_backward_.at(s) == pos) hooks_.after_last_backward(s);
        break;
      }
    }
  }
  if (progress_ && !actions.empty())
    report_wait(actions.back(), "the backend to finish the step's actions (and the tp group's all-reduces in them)");
  // A transport that holds sends back until the device has copied them out (the staged MPI
  // transport) posts them now, not after the wait below: the peers get their last
  // activations and gradients while this rank's last W actions run.
  pp_.progress(/*all=*/true);
  finish_compute(timeline);
  poll_device_recvs(/*all=*/true);
  // The losses in F order, summed in it (the bits of adding each as its F ended).
  double loss = 0;
  if (loss_count_) {
    std::vector<double> host(loss_count_);
    ops_.copy_to_host(host.data(), losses_.data(), loss_count_ * sizeof(double));
    for (double l : host) loss += l;
  }
  tick();
  if (progress_ && (!sends_.empty() || !unreleased_.empty()) && !actions.empty())
    report_wait(actions.back(), "its sends to complete at the end of the step");
  poll_unreleased(/*wait_all=*/true);
  for (auto& [key, send] : sends_) {  // sends of microbatches without W (evaluation)
    if (!send.request->test()) send.request->wait();
    transfer_done(cat(key.first, send.op == Op::SEND_F ? "SEND_F" : "SEND_B", key.second), send.posted_us);
  }
  sends_.clear();
  timeline_ = nullptr;
  tick();
  if (!recvs_.empty()) {
    auto [dir, s, mb] = recvs_.begin()->first;
    fail("pipeline rank ", pp_rank_, ": receive ", s, dir == Direction::Forward ? "RECV_F" : "RECV_B", mb,
         " was posted but never used by the program");
  }
  return loss;
}

}  // namespace pptrain
