/* nop: does nothing (start-up cost of the preload, like /bin/true). */
int main(void)
{
	return 0;
}
