		{
			name: "failure policy rule name is valid",
			js: &jobset.JobSet{
				ObjectMeta: validObjectMeta,
				Spec: jobset.JobSetSpec{
					ReplicatedJobs: []jobset.ReplicatedJob{
						{
							Name:      "rj",
							GroupName: "default",
							Replicas:  1,
							Template: batchv1.JobTemplateSpec{
								Spec: batchv1.JobSpec{
									CompletionMode: ptr.To(batchv1.IndexedCompletion),
									Completions:    ptr.To(int32(1)),
									Parallelism:    ptr.To(int32(1)),
								},
							},
						},
					},
					FailurePolicy: &jobset.FailurePolicy{
						Rules: []jobset.FailurePolicyRule{
							{Name: "superAwesomeFailurePolicyRule"},
						},
					},
					SuccessPolicy: &jobset.SuccessPolicy{},
				},
			},
			want: errors.Join(),
		},
		{
			name: "jobset failure policy has an invalid on job failure reason",
			js: &jobset.JobSet{
				ObjectMeta: validObjectMeta,
				Spec: jobset.JobSetSpec{
					FailurePolicy: &jobset.FailurePolicy{
						MaxRestarts: 1,
						Rules: []jobset.FailurePolicyRule{
							{
								Action:              jobset.FailJobSet,
								OnJobFailureReasons: []string{"fakeReason"},
							},
						},
					},
					ReplicatedJobs: []jobset.ReplicatedJob{
						{
							Name:      "rj",
							GroupName: "default",
							Replicas:  1,
							Template: batchv1.JobTemplateSpec{
								Spec: batchv1.JobSpec{
									CompletionMode: ptr.To(batchv1.IndexedCompletion),
									Completions:    ptr.To(int32(1)),
									Parallelism:    ptr.To(int32(1)),
								},
							},
						},
					},
					SuccessPolicy: &jobset.SuccessPolicy{},
				},
			},
			want: errors.Join(
				fmt.Errorf("invalid job failure reason '%s' in failure policy is not a recognized job failure reason", "fakeReason"),
			),
		},
		{
			name: "jobset failure policy has an invalid replicated job",
			js: &jobset.JobSet{
				ObjectMeta: validObjectMeta,
				Spec: jobset.JobSetSpec{
					FailurePolicy: &jobset.FailurePolicy{
						MaxRestarts: 1,
						Rules: []jobset.FailurePolicyRule{
							{
								Action:               jobset.FailJobSet,
								TargetReplicatedJobs: []string{"fakeReplicatedJob"},
							},
						},
					},
					ReplicatedJobs: []jobset.ReplicatedJob{
						{
							Name:      "rj",
							GroupName: "default",
							Replicas:  1,
							Template: batchv1.JobTemplateSpec{
								Spec: batchv1.JobSpec{
									CompletionMode: ptr.To(batchv1.IndexedCompletion),
									Completions:    ptr.To(int32(1)),
									Parallelism:    ptr.To(int32(1)),
								},
							},
						},
					},
					SuccessPolicy: &jobset.SuccessPolicy{},
				},
			},
			want: errors.Join(
				fmt.Errorf("invalid replicatedJob name '%s' in failure policy does not appear in .spec.ReplicatedJobs", "fakeReplicatedJob"),
			),
		},
		{
			name: "jobset failure policy rule name is 0 characters long a.k.a unset",
			js: &jobset.JobSet{
				ObjectMeta: validObjectMeta,
				Spec: jobset.JobSetSpec{
					ReplicatedJobs: []jobset.ReplicatedJob{
						{
							Name:      "rj",
							GroupName: "default",
							Replicas:  1,
							Template: batchv1.JobTemplateSpec{
								Spec: batchv1.JobSpec{
									CompletionMode: ptr.To(batchv1.IndexedCompletion),
									Completions:    ptr.To(int32(1)),
									Parallelism:    ptr.To(int32(1)),
								},
							},
						},
					},
					FailurePolicy: &jobset.FailurePolicy{
						Rules: make([]jobset.FailurePolicyRule, 1),
					},
					SuccessPolicy: &jobset.SuccessPolicy{},
				},
			},
			want: errors.Join(
				fmt.Errorf("invalid failure policy rule name of length %v, the rule name must be at least %v characters long and at most %v characters long", 0, minRuleNameLength, maxRuleNameLength),
			),
		},
		{
			name: "jobset failure policy rule name is greater than 128 characters long",
			js: &jobset.JobSet{
				ObjectMeta: validObjectMeta,
				Spec: jobset.JobSetSpec{
					ReplicatedJobs: []jobset.ReplicatedJob{
						{
							Name:      "rj",
							GroupName: "default",
							Replicas:  1,
							Template: batchv1.JobTemplateSpec{
								Spec: batchv1.JobSpec{
									CompletionMode: ptr.To(batchv1.IndexedCompletion),
									Completions:    ptr.To(int32(1)),
									Parallelism:    ptr.To(int32(1)),
								},
							},
						},
					},
					FailurePolicy: &jobset.FailurePolicy{
						Rules: []jobset.FailurePolicyRule{
							{Name: strings.Repeat("a", 129)},
						},
					},
					SuccessPolicy: &jobset.SuccessPolicy{},
				},
			},
			want: errors.Join(
				fmt.Errorf("invalid failure policy rule name of length %v, the rule name must be at least %v characters long and at most %v characters long", 129, minRuleNameLength, maxRuleNameLength),
			),
		},
		{
			name: "there are two failure policy rules with the same name",
			js: &jobset.JobSet{
				ObjectMeta: validObjectMeta,
				Spec: jobset.JobSetSpec{
					ReplicatedJobs: []jobset.ReplicatedJob{
						{
							Name:      "rj",
							GroupName: "default",
							Replicas:  1,
							Template: batchv1.JobTemplateSpec{
								Spec: batchv1.JobSpec{
									CompletionMode: ptr.To(batchv1.IndexedCompletion),
									Completions:    ptr.To(int32(1)),
									Parallelism:    ptr.To(int32(1)),
								},
							},
						},
					},
					FailurePolicy: &jobset.FailurePolicy{
						Rules: []jobset.FailurePolicyRule{
							{Name: "repeatedRuleName"},
							{Name: "repeatedRuleName"},
						},
					},
					SuccessPolicy: &jobset.SuccessPolicy{},
				},
			},
			want: errors.Join(
				fmt.Errorf("rule names are not unique, rules with indices %v all have the same name '%v'", []int{0, 1}, "repeatedRuleName"),
			),
		},
		{
			name: "failure policy rule name does not start with an alphabetic character",
			js: &jobset.JobSet{
				ObjectMeta: validObjectMeta,
				Spec: jobset.JobSetSpec{
					ReplicatedJobs: []jobset.ReplicatedJob{
						{
							Name:      "rj",
							GroupName: "default",
							Replicas:  1,
							Template: batchv1.JobTemplateSpec{
								Spec: batchv1.JobSpec{
									CompletionMode: ptr.To(batchv1.IndexedCompletion),
									Completions:    ptr.To(int32(1)),
									Parallelism:    ptr.To(int32(1)),
								},
							},
						},
					},
					FailurePolicy: &jobset.FailurePolicy{
						Rules: []jobset.FailurePolicyRule{
							{Name: "1ruleToRuleThemAll"},
						},
					},
					SuccessPolicy: &jobset.SuccessPolicy{},
				},
			},
			want: errors.Join(
				fmt.Errorf("invalid failure policy rule name '%v', a failure policy rule name must start with an alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'", "1ruleToRuleThemAll"),
			),
		},
		{
			name: "failure policy rule name does not end with an alphanumeric nor '_'",
			js: &jobset.JobSet{
				ObjectMeta: validObjectMeta,
				Spec: jobset.JobSetSpec{
					ReplicatedJobs: []jobset.ReplicatedJob{
						{
							Name:      "rj",
							GroupName: "default",
							Replicas:  1,
							Template: batchv1.JobTemplateSpec{
								Spec: batchv1.JobSpec{
									CompletionMode: ptr.To(batchv1.IndexedCompletion),
									Completions:    ptr.To(int32(1)),
									Parallelism:    ptr.To(int32(1)),
								},
							},
						},
					},
					FailurePolicy: &jobset.FailurePolicy{
						Rules: []jobset.FailurePolicyRule{
							{Name: "ruleToRuleThemAll,"},
						},
					},
					SuccessPolicy: &jobset.SuccessPolicy{},
				},
			},
			want: errors.Join(
				fmt.Errorf("invalid failure policy rule name '%v', a failure policy rule name must start with an alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'", "ruleToRuleThemAll,"),
			),
		},
