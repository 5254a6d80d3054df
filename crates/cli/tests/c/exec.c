/* exec.c -- a threaded program that execs itself; the new image must run
 * under the runtime again (settings pass through the environment). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void *work(void *arg)
{
	(void)arg;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < 20);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	pthread_create(&t, NULL, work, NULL);
	if (argc > 1 && strcmp(argv[1], "child") == 0) {
		pthread_join(t, NULL);
		printf("exec: new image ok preload=%s\n",
				getenv("LD_PRELOAD") ? "yes" : "no");
		return 0;
	}
	/* exec from the main thread while another thread runs */
	execl("/proc/self/exe", argv[0], "child", (char *)NULL);
	perror("execl");
	return 1;
}
