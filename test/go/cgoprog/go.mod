module cgoprog

go 1.19
