/* exec.c -- a threaded program that execs itself; the new image must run
 * under the runtime again (settings pass through the environment).
 *
 *   exec          exec from the main thread while another thread runs
 *   exec chain    walk every exec function in turn (execl with stack-
 *                 passed arguments, execlp through PATH, execle with 300
 *                 arguments and its own environment, execv, execvp,
 *                 fexecve, execve), each step first checking that a failed
 *                 exec returns ENOENT and leaves no signal blocked. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void spin_ms(int ms)
{
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < ms);
}

static void *work(void *arg)
{
	(void)arg;
	spin_ms(20);
	return NULL;
}

/* True when this thread blocks no signal (SigBlk in /proc/self/status). */
static int nothing_blocked(void)
{
	char line[256];
	FILE *f = fopen("/proc/thread-self/status", "r");
	int ok = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, "SigBlk:", 7) == 0)
			ok = strspn(line + 7, "\t 0") == strlen(line + 7) - 1;
	fclose(f);
	return ok;
}

static void fail(const char *what, int step)
{
	printf("exec: chain FAILED at step %d: %s\n", step, what);
	fflush(stdout);
	_exit(3);
}

#define X4 "x", "x", "x", "x"
#define X20 X4, X4, X4, X4, X4
#define X100 X20, X20, X20, X20, X20
#define X300 X100, X100, X100

/* Number of "x" arguments each step receives. */
static const int extras[] = {0, 0, 3, 10, 300, 1, 1, 1, 1};

static int chain(int argc, char **argv, const char *self)
{
	int step = argc > 2 ? atoi(argv[2]) : 0;
	int want = extras[step];
	if (argc != (step == 0 ? 2 : 3 + want))
		fail("wrong argument count", step);
	for (int i = 3; i < argc; i++)
		if (strcmp(argv[i], "x") != 0)
			fail("wrong argument", step);
	if (step == 4 && strcmp(getenv("PMLAB_EXEC_TEST") ? getenv("PMLAB_EXEC_TEST") : "", "le") != 0)
		fail("execle lost its environment", step);
	spin_ms(5);
	errno = 0;
	if (execl("/nonexistent/pmlab-exec-test", "x", (char *)NULL) != -1 || errno != ENOENT)
		fail("a failed exec did not return ENOENT", step);
	if (!nothing_blocked())
		fail("a failed exec left a signal blocked", step);
	spin_ms(5);
	char next[16];
	snprintf(next, sizeof next, "%d", step + 1);
	char *v[] = {argv[0], "chain", next, "x", NULL};
	switch (step) {
	case 0:
		execl(self, argv[0], "chain", "1", (char *)NULL);
		break;
	case 1:
		execl(self, argv[0], "chain", "2", "x", "x", "x", (char *)NULL);
		break;
	case 2: {
		/* PATH search: the directory of the program, its base name. */
		char dir[4096], base[4096];
		snprintf(dir, sizeof dir, "%s", self);
		snprintf(base, sizeof base, "%s", self);
		setenv("PATH", dirname(dir), 1);
		execlp(basename(base), argv[0], "chain", "3", X4, X4, "x", "x",
				(char *)NULL);
		break;
	}
	case 3: {
		/* execle: its own environment, which must keep the runtime's
		 * variables (LD_PRELOAD, PMLAB_*) for the next image. */
		extern char **environ;
		int n = 0;
		while (environ[n])
			n++;
		char **env = calloc(n + 2, sizeof *env);
		memcpy(env, environ, n * sizeof *env);
		env[n] = "PMLAB_EXEC_TEST=le";
		execle(self, argv[0], "chain", "4", X300, (char *)NULL, env);
		break;
	}
	case 4:
		execv(self, v);
		break;
	case 5:
		setenv("PATH", "/nonexistent", 1);
		execvp(self, v);
		break;
	case 6: {
		int fd = open(self, O_RDONLY | O_CLOEXEC);
		extern char **environ;
		fexecve(fd, v, environ);
		break;
	}
	case 7: {
		extern char **environ;
		execve(self, v, environ);
		break;
	}
	default:
		printf("exec: chain ok steps=%d preload=%s\n", step,
				getenv("LD_PRELOAD") ? "yes" : "no");
		return 0;
	}
	perror("exec");
	fail("exec returned", step);
	return 1;
}

int main(int argc, char **argv)
{
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n < 0)
		return 2;
	self[n] = 0;
	if (argc > 1 && strcmp(argv[1], "chain") == 0)
		return chain(argc, argv, self);
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
