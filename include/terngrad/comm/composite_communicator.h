// CompositeCommunicator: P processes x R in-process ranks (threads) as one group of P*R ranks, rank = p*R + r,
// host memory. Built, for in-process rank r of process p, from
//   inner: a communicator over the R ranks of this process (a ThreadCommunicator; rank r), and
//   outer: a communicator over the P processes (an MpiCommunicator; rank p) that only in-process rank r drives:
//          one per r (MPI dups/splits), so the R replica threads of a process never share an MPI communicator.
// The composite owns both. Collectives, composed so that only 1/R of each payload crosses between processes
// per in-process rank (each of the R outer communicators carries its own share):
//   allreduce (count elements): the first R*floor(count/R) as inner reduce_scatter (shard r) -> outer allreduce
//     of shard r -> inner allgather (in place); the remaining count mod R elements as inner allreduce -> outer
//     allreduce on r = 0 -> inner broadcast from r = 0. Reduction order: over a process's ranks first (the
//     inner's order: rank order for threads), then over the processes (the outer's order). Every rank gets the
//     same bits.
//   reduce_scatter (count elements per rank): the send blocks are regrouped by in-process rank (block p*R + r
//     to position r*P + p of a scratch), inner reduce_scatter of P*count elements, outer reduce_scatter of
//     count. Same order as allreduce.
//   allgather: outer allgather of the own block (the P blocks of in-process rank r) -> inner allgather ->
//     reordered into rank order.
//   broadcast from p0*R + r0: outer broadcast from p0 on in-process rank r0 -> inner broadcast from r0.
//   barrier: inner barrier, then outer barrier (all R outer communicators).
// split() is not offered (it throws naming this class): make the sub-groups from the inner and outer
// communicators' own splits (replica_groups.h does).
// Byte counters: this communicator's follow the flat model of communicator.h over P*R ranks (so fp32 all-reduce
// bytes compare with a flat ring's); inner() and outer() count what each actually carried (intra- and
// inter-process bytes). The scratch of reduce_scatter and allgather grows to the largest call and is reused.
// Driven by one thread at a time (the replica's), like its inner and outer communicators.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/comm/communicator.h"

namespace tg {

class CompositeCommunicator final : public Communicator {
 public:
  // inner: rank r of R, outer: rank p of P (both non-null, host memory).
  CompositeCommunicator(std::unique_ptr<Communicator> inner, std::unique_ptr<Communicator> outer);
  ~CompositeCommunicator() override;
  CompositeCommunicator(const CompositeCommunicator&) = delete;
  CompositeCommunicator& operator=(const CompositeCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override;  // "composite (rank 3 of 4: process 1 of 2, local 1 of 2)"
  // Combinations both inner and outer reduce.
  bool supports(DType dtype, ReduceOp op) const override;

  Communicator& inner() { return *inner_; }
  Communicator& outer() { return *outer_; }
  const Communicator& inner() const { return *inner_; }
  const Communicator& outer() const { return *outer_; }

 protected:
  // split_impl throws (see the file comment).
#define TG_DECLARE_COMM_IMPL(ret, name, params) ret name params override;
  TG_COMMUNICATOR_IMPLS(TG_DECLARE_COMM_IMPL)
#undef TG_DECLARE_COMM_IMPL

 private:
  uint8_t* scratch(size_t bytes);  // grows, never shrinks

  std::unique_ptr<Communicator> inner_;
  std::unique_ptr<Communicator> outer_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<uint8_t> scratch_;
};

}  // namespace tg
