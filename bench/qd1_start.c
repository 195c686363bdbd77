// A minimal QD1 random reader on io_uring (liburing), for bench/qd1_start.sh: O_DIRECT 4 KiB reads
// at uniformly random offsets of a block device, one in flight, with the system calls fio's
// io_uring engine makes (submit with GETEVENTS, then wait for one completion only if none is
// ready) and the ring flags fio 3.33 sets. It has none of diskprobe_exporter's code, so what it
// shows about QD1 on a loop device is about the machine, not about our engine.
//
// Usage: qd1_start DEVICE SECONDS PAUSE_MS [PARENT_POLL]
//   Sets up, sleeps PAUSE_MS, then reads for SECONDS and prints "IOPS MEAN_LATENCY_US".
//   With PARENT_POLL=1 the reader runs in a child process while the parent checks on it every
//   10 ms (waitpid with WNOHANG, then usleep), as fio's main process does with its job processes.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: %s DEVICE SECONDS PAUSE_MS [PARENT_POLL]\n", argv[0]);
    return 2;
  }
  if (argc == 5 && atoi(argv[4]) != 0) {
    pid_t child = fork();
    if (child < 0) {
      perror("fork");
      return 1;
    }
    if (child > 0) {
      int status = 0;
      while (waitpid(child, &status, WNOHANG) == 0) usleep(10000);
      return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
  }
  int fd = open(argv[1], O_RDONLY | O_DIRECT);
  if (fd < 0) {
    perror(argv[1]);
    return 1;
  }
  double seconds = atof(argv[2]);
  long pause_ms = atol(argv[3]);
  uint64_t size = 0;
  if (ioctl(fd, BLKGETSIZE64, &size) != 0 || size < 4096) {
    fprintf(stderr, "%s: not a block device of at least 4 KiB\n", argv[1]);
    return 1;
  }
  uint64_t blocks = size / 4096;

  struct io_uring ring;
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN;
  int r = io_uring_queue_init_params(1, &ring, &p);
  if (r != 0) {
    fprintf(stderr, "io_uring_queue_init_params: %s\n", strerror(-r));
    return 1;
  }
  void *buf;
  if (posix_memalign(&buf, 4096, 4096) != 0) return 1;

  usleep((useconds_t)(pause_ms * 1000));

  uint64_t x = 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid();
  long n = 0;
  double total = 0, start = now(), end = start + seconds;
  for (;;) {
    double issued = now();
    if (issued >= end) break;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    io_uring_prep_read(sqe, fd, buf, 4096, (x % blocks) * 4096);
    io_uring_submit_and_get_events(&ring);
    struct io_uring_cqe *cqe;
    if (io_uring_peek_cqe(&ring, &cqe) != 0 && (r = io_uring_wait_cqe(&ring, &cqe)) != 0) {
      fprintf(stderr, "io_uring_wait_cqe: %s\n", strerror(-r));
      return 1;
    }
    if (cqe->res != 4096) {
      fprintf(stderr, "read: %s\n", cqe->res < 0 ? strerror(-cqe->res) : "short read");
      return 1;
    }
    io_uring_cqe_seen(&ring, cqe);
    n++;
    total += now() - issued;
  }
  printf("%.0f %.1f\n", (double)n / (now() - start), total / (double)n * 1e6);
  return 0;
}
