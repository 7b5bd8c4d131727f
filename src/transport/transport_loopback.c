/* The loopback transport (transport_loopback.h): the ranks of a job are threads of one
 * process. One lock guards the whole world; a post either finds its counterpart waiting in
 * the queue of its (channel, source, destination) and copies at once, completing both
 * requests, or joins that queue. Waits sleep on one condition variable, with a deadline. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport_loopback.h"

typedef struct {
  int owner; /* world rank that posted it */
  long ticket;
  char *buf;
  size_t bytes;
} lb_request;

/* Unmatched requests of one direction between two ranks on one channel, oldest first. */
typedef struct {
  lb_request *items;
  int head, count, cap; /* items[head .. count) are waiting */
} lb_queue;

typedef struct {
  rf_loopback *lb;
  int rank, open;
  long next_ticket;    /* the ticket of the next post */
  long complete_below; /* every ticket below it has completed and been waited for */
  char *done;          /* [ticket]: completed */
  int done_cap;        /* entries of done */
  void **buffers;      /* what this rank exposed (mapped variant), kept until the world ends */
  int buffer_count;    /* how many: expose appends */
} lb_end;

struct rf_loopback {
  const rf_plan *plan;
  int ranks, mapped;
  double timeout;
  pthread_mutex_t lock;
  pthread_cond_t changed;  /* broadcast whenever a request completes or a rank arrives */
  lb_queue *sends, *recvs; /* [(channel * ranks + source) * ranks + destination] */
  lb_end *ends;
  int arrived, generation; /* the expose barrier */
  rf_status exposed;       /* the worst status the ranks brought to the barrier */
};

static lb_queue *queue(lb_queue *table, const rf_loopback *lb, rf_channel ch, int src, int dst) {
  return &table[((size_t)ch * (size_t)lb->ranks + (size_t)src) * (size_t)lb->ranks + (size_t)dst];
}

/* The world rank of a channel rank: the trainer channel numbers trainer ranks. */
static int world_rank(const rf_loopback *lb, rf_channel ch, int peer) {
  return ch == RF_CHANNEL_TRAINER ? rf_layout_trainer_world_rank(lb->plan->layout, peer) : peer;
}

static void deadline_after(double seconds, struct timespec *at) {
  clock_gettime(CLOCK_REALTIME, at);
  double whole = (double)(time_t)seconds;
  at->tv_sec += (time_t)seconds;
  at->tv_nsec += (long)((seconds - whole) * 1e9);
  if (at->tv_nsec >= 1000000000L) {
    at->tv_sec++;
    at->tv_nsec -= 1000000000L;
  }
}

/* Removes every waiting request that `rank` posted, so that no peer copies into or out of
 * its buffers after it stopped waiting for them. Called with the lock held. */
static void withdraw(rf_loopback *lb, int rank) {
  lb_queue *tables[2] = {lb->sends, lb->recvs};
  size_t queues = 2 * (size_t)lb->ranks * (size_t)lb->ranks;
  for (int t = 0; t < 2; t++)
    for (size_t q = 0; q < queues; q++) {
      lb_queue *qu = &tables[t][q];
      int kept = qu->head;
      for (int i = qu->head; i < qu->count; i++)
        if (qu->items[i].owner != rank)
          qu->items[kept++] = qu->items[i];
      qu->count = kept;
    }
}

static void complete(rf_loopback *lb, int rank, long ticket) { lb->ends[rank].done[ticket] = 1; }

/* Posts one request of `rank`; `mine` is the queue it waits in, `theirs` the queue of its
 * counterpart. Called with the lock held. */
static rf_status post(rf_loopback *lb, lb_end *end, int send, lb_queue *mine, lb_queue *theirs,
                      int peer, char *buf, size_t bytes, long *ticket) {
  RF_TRY(rf_grow((void **)&end->done, (int)end->next_ticket, &end->done_cap, 1,
                 "loopback completions"));
  long t = end->next_ticket++;
  end->done[t] = 0;
  *ticket = t;
  if (theirs->head < theirs->count) {
    lb_request other = theirs->items[theirs->head++];
    if (theirs->head == theirs->count)
      theirs->head = theirs->count = 0;
    if (other.bytes != bytes)
      return rf_fail(RF_ERR_INTERNAL,
                     "loopback: rank %d %s %zu bytes %s rank %d, which posted %zu; the two ends "
                     "walked different schedules",
                     end->rank, send ? "sends" : "expects", bytes, send ? "to" : "from", peer,
                     other.bytes);
    memcpy(send ? other.buf : buf, send ? buf : other.buf, bytes);
    complete(lb, end->rank, t);
    complete(lb, other.owner, other.ticket);
    pthread_cond_broadcast(&lb->changed);
    return RF_OK;
  }
  if (mine->count == mine->cap && mine->head > 0) {
    /* Compact first: the queue's consumed head is room. */
    memmove(mine->items, mine->items + mine->head,
            (size_t)(mine->count - mine->head) * sizeof *mine->items);
    mine->count -= mine->head;
    mine->head = 0;
  }
  RF_TRY(rf_grow((void **)&mine->items, mine->count, &mine->cap, sizeof *mine->items,
                 "loopback queue"));
  mine->items[mine->count++] = (lb_request){end->rank, t, buf, bytes};
  return RF_OK;
}

static rf_status lb_post(rf_transport *tp, int send, rf_channel ch, int peer, void *buf,
                         size_t bytes, long *ticket) {
  lb_end *end = tp->state;
  rf_loopback *lb = end->lb;
  int other = world_rank(lb, ch, peer);
  if (other < 0 || other >= lb->ranks)
    return rf_fail(RF_ERR_INTERNAL, "loopback: rank %d has no peer %d on channel %d", end->rank,
                   peer, (int)ch);
  int src = send ? end->rank : other, dst = send ? other : end->rank;
  pthread_mutex_lock(&lb->lock);
  lb_queue *sends = queue(lb->sends, lb, ch, src, dst), *recvs = queue(lb->recvs, lb, ch, src, dst);
  rf_status st = send ? post(lb, end, 1, sends, recvs, other, buf, bytes, ticket)
                      : post(lb, end, 0, recvs, sends, other, buf, bytes, ticket);
  pthread_mutex_unlock(&lb->lock);
  return st;
}

static rf_status lb_wait(rf_transport *tp, long upto, const char *what) {
  lb_end *end = tp->state;
  rf_loopback *lb = end->lb;
  struct timespec at;
  deadline_after(lb->timeout, &at);
  int expired = 0;
  pthread_mutex_lock(&lb->lock);
  upto = RF_MIN(upto, end->next_ticket);
  for (;;) {
    while (end->complete_below < upto && end->done[end->complete_below])
      end->complete_below++;
    if (end->complete_below >= upto || expired)
      break;
    expired = pthread_cond_timedwait(&lb->changed, &lb->lock, &at) == ETIMEDOUT;
  }
  int finished = end->complete_below >= upto;
  if (!finished)
    withdraw(lb, end->rank);
  pthread_mutex_unlock(&lb->lock);
  return finished ? RF_OK : rf_timeout_error(lb->timeout, what, NULL);
}

static rf_status lb_noop(rf_transport *tp) { return RF_OK; }

static rf_status lb_init(rf_transport *tp) {
  lb_end *end = tp->state;
  end->open = 1;
  end->next_ticket = end->complete_below = 0;
  return RF_OK;
}

static void lb_finalize(rf_transport *tp) {
  lb_end *end = tp->state;
  pthread_mutex_lock(&end->lb->lock);
  withdraw(end->lb, end->rank);
  free(end->done);
  end->done = NULL;
  end->done_cap = 0;
  end->open = 0;
  pthread_mutex_unlock(&end->lb->lock);
  tp->state = NULL;
}

/* Collective over the world: each rank leaves its buffers, then waits for every other rank;
 * everyone returns the worst status any rank brought (the control plane's agreement). */
static rf_status lb_expose(rf_transport *tp, void *const *buffers, int count) {
  lb_end *end = tp->state;
  rf_loopback *lb = end->lb;
  rf_status mine = RF_OK;
  pthread_mutex_lock(&lb->lock);
  void **grown =
      realloc(end->buffers, ((size_t)end->buffer_count + (size_t)count + 1) * sizeof *end->buffers);
  if (grown) { /* appended after what earlier calls exposed */
    memcpy(grown + end->buffer_count, buffers, (size_t)count * sizeof *buffers);
    end->buffers = grown;
    end->buffer_count += count;
  } else {
    mine = RF_ERR_NOMEM;
  }
  if (lb->arrived == 0)
    lb->exposed = RF_OK;
  lb->exposed = rf_status_worse(lb->exposed, mine);
  int generation = lb->generation;
  struct timespec at;
  deadline_after(lb->timeout, &at);
  int expired = 0;
  if (++lb->arrived == lb->ranks) {
    lb->arrived = 0;
    lb->generation++;
    pthread_cond_broadcast(&lb->changed);
  }
  while (lb->generation == generation && !expired)
    expired = pthread_cond_timedwait(&lb->changed, &lb->lock, &at) == ETIMEDOUT;
  int passed = lb->generation != generation;
  if (!passed)
    lb->arrived--;
  rf_status st = lb->exposed;
  pthread_mutex_unlock(&lb->lock);
  return passed ? st : rf_timeout_error(lb->timeout, "the other ranks' buffers", NULL);
}

static rf_status lb_peer_buffer(rf_transport *tp, int peer, int index, void **out) {
  lb_end *end = tp->state;
  rf_loopback *lb = end->lb;
  *out = NULL;
  /* Under the lock: a peer that went on to its next expose may be growing its table. */
  pthread_mutex_lock(&lb->lock);
  int have = peer >= 0 && peer < lb->ranks && index >= 0 && index < lb->ends[peer].buffer_count &&
             lb->ends[peer].buffers;
  if (have)
    *out = lb->ends[peer].buffers[index]; /* NULL where the rank offered none */
  pthread_mutex_unlock(&lb->lock);
  if (!have)
    return rf_fail(RF_ERR_INTERNAL, "loopback: rank %d has no buffer %d to map", peer, index);
  return RF_OK;
}

static const rf_transport_ops loopback_ops = {
    .name = "loopback",
    .description = "tests only: ranks as threads of one process, messages through memory",
    .memory = RF_MEM_HOST,
    .init = lb_init,
    .finalize = lb_finalize,
    .group_start = lb_noop,
    .group_end = lb_noop,
    .post = lb_post,
    .wait = lb_wait,
};

static const rf_transport_ops loopback_mapped_ops = {
    .name = "loopback-mapped",
    .description = "tests only: ranks as threads of one process, each copying straight out of "
                   "(or into) the others' memory",
    .memory = RF_MEM_HOST,
    .mapping = 1,
    .maps_caller_memory = 1,
    .init = lb_init,
    .finalize = lb_finalize,
    .group_start = lb_noop,
    .group_end = lb_noop,
    .post = lb_post,
    .wait = lb_wait,
    .expose = lb_expose,
    .peer_buffer = lb_peer_buffer,
};

rf_status rf_loopback_create(const rf_plan *plan, int mapped, double timeout, rf_loopback **out) {
  *out = NULL;
  rf_loopback *lb = rf_calloc(1, sizeof *lb, "a loopback world");
  if (!lb)
    return RF_ERR_NOMEM;
  lb->plan = plan;
  lb->ranks = plan->layout->world_size;
  lb->mapped = mapped;
  lb->timeout = timeout;
  size_t queues = 2 * (size_t)lb->ranks * (size_t)lb->ranks;
  lb->sends = rf_calloc(queues, sizeof *lb->sends, "loopback queues");
  lb->recvs = rf_calloc(queues, sizeof *lb->recvs, "loopback queues");
  lb->ends = rf_calloc((size_t)lb->ranks, sizeof *lb->ends, "loopback ranks");
  if (!lb->sends || !lb->recvs || !lb->ends) {
    free(lb->sends), free(lb->recvs), free(lb->ends), free(lb);
    return RF_ERR_NOMEM;
  }
  for (int r = 0; r < lb->ranks; r++)
    lb->ends[r] = (lb_end){.lb = lb, .rank = r};
  pthread_mutex_init(&lb->lock, NULL);
  pthread_cond_init(&lb->changed, NULL);
  *out = lb;
  return RF_OK;
}

rf_status rf_loopback_open(rf_loopback *lb, int rank, rf_transport *tp) {
  memset(tp, 0, sizeof *tp);
  if (rank < 0 || rank >= lb->ranks || lb->ends[rank].open)
    return rf_fail(RF_ERR_INTERNAL, "loopback: rank %d is not a free rank of this %d-rank world",
                   rank, lb->ranks);
  tp->ops = lb->mapped ? &loopback_mapped_ops : &loopback_ops;
  tp->ctl = NULL;
  tp->plan = lb->plan;
  tp->state = &lb->ends[rank];
  return tp->ops->init(tp);
}

void rf_loopback_free(rf_loopback *lb) {
  if (!lb)
    return;
  size_t queues = 2 * (size_t)lb->ranks * (size_t)lb->ranks;
  for (size_t q = 0; q < queues; q++) {
    free(lb->sends[q].items);
    free(lb->recvs[q].items);
  }
  for (int r = 0; r < lb->ranks; r++) {
    free(lb->ends[r].done);
    free(lb->ends[r].buffers);
  }
  pthread_mutex_destroy(&lb->lock);
  pthread_cond_destroy(&lb->changed);
  free(lb->sends);
  free(lb->recvs);
  free(lb->ends);
  free(lb);
}
