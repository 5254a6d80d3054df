/* fast_exit.c -- a program that ends with _exit(3), skipping its atexit
 * handlers, where the runtime writes its statistics. Before that it runs
 * ~50 ms of busy work (epochs), a forked child that ends with _exit(0),
 * and a posix_spawn of a program that does not exist: glibc's spawn child
 * shares our memory (vfork-like) and ends with _exit(127), which must not
 * write or spoil the parent's report. Prints "fast_exit: ready" first. */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static void busy_ms(long ms)
{
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < ms);
}

int main(void)
{
	busy_ms(25);
	pid_t c = fork();
	if (c == 0) {
		busy_ms(5);
		_exit(0);
	}
	int st = 0;
	if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		printf("fast_exit: forked child failed\n");
		return 1;
	}
	pid_t s;
	char *argv[] = {"/nonexistent/pmlab-test", NULL};
	if (posix_spawn(&s, argv[0], NULL, NULL, argv, environ) == 0)
		waitpid(s, &st, 0);
	busy_ms(25);
	printf("fast_exit: ready\n");
	fflush(stdout);
	_exit(3);
}
